// Loading tensors straight into GPU memory: reads land in a bounded ring of pinned staging slots,
// are checked / decrypted there, and are copied to one device allocation on the uploader's streams.
#pragma once

#include "tz/byte_source.hpp"
#include "tz/cuda.hpp"
#include "tz/dlpack.hpp"
#include "tz/error.hpp"
#include "tz/format/encryption.hpp"
#include "tz/format/tensorizer.hpp"
#include "tz/lease_ring.hpp"
#include "tz/loader.hpp"
#include "tz/scheduler.hpp"
#include "tz/task.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tz {

// Whether a load may skip the staging ring and copy straight from the file's pages in the page
// cache (see device_load_options::direct_from_page_cache).
enum class direct_mode {
  automatic,  // when it applies and at least 90% of the selected pages are cached
  on,         // always; a load it cannot apply to fails (errc::invalid_argument)
  off,        // never: the staging ring
};

struct device_load_options {
  // The staging ring: slot_count pinned slots of slot_bytes each (plus one page per slot, so that a
  // read lands at its file offset modulo 4 KiB and O_DIRECT applies). It bounds the pinned host
  // memory of a load whatever the model size; slot_bytes is also the largest single read.
  // 4 MiB slots: the slots in use (readers x slot) then fit the host's last-level cache, so the
  // GPU's DMA read of a slot hits the cache the copy into it just filled instead of memory. On
  // H100 hosts (16 cores, 4 GiB warm file, gpu_load_bench) 16 x 4 MiB reached 41-46 GB/s where
  // 16 x 16 MiB reached 34-37 GB/s on the same machines (pinned copy limit 52-55 GB/s); 2-3 MiB
  // slots pay more per copy, 8 MiB and more spill the cache. Cold (O_DIRECT) loads were no slower.
  std::size_t slot_count = 16;
  std::size_t slot_bytes = 4u << 20;
  // Reads in flight at once; 0 = automatic (2 per worker, at most 3/4 of the slots, so that slots
  // are free for uploads while the readers wait on I/O).
  unsigned readers = 0;
  // Check each tensor's stored CRC32 / SHA-256 (.tensors) on the host, before its bytes are
  // uploaded. A tensor split over several slots is hashed part by part in file order.
  bool verify = false;
  // Required for encrypted files (and refused for plain ones, like the host loader).
  std::optional<format::decryption> decryption;
  // A caller-owned ring of pinned slots (make_pinned_ring) reused by successive loads, which then
  // skip pinning memory (tens of milliseconds for 256 MiB). Null: each load makes its own from
  // slot_count / slot_bytes, freed at its end. At most one load may use a ring at a time.
  lease_ring* ring = nullptr;

  // The direct path, for a local file whose pages are in the page cache: the file is mapped
  // read-only and each chunk of it is pinned in place (cudaHostRegister, read-only) and copied to
  // the device from there, then unpinned. Each byte then crosses host memory once (the GPU's DMA
  // read) instead of three times (page cache -> slot, slot -> the DMA read), but pinning costs CPU
  // time per 4 KiB page. The ring is bound by host memory bandwidth and pinning by CPU time, so a
  // warm load runs both at once: the last `direct_fraction` of the bytes go direct while the ring
  // reads the rest (1: all direct, no ring allocated; 0: the ring only). It applies to plain files
  // loaded without `verify` (those need the bytes on the host), on a device that supports
  // read-only registration, when `local_file` names the file `source` reads (same size). The
  // mapping is the page cache, not new memory; the pages pinned at once are bounded by
  // direct_pinned_bytes.
  // Off by default: on the H100 hosts measured (16 cores, 4 GiB warm file, gpu_load_bench), pinning
  // 4 KiB page-cache pages ran at 26-36 GB/s on 16 threads with no copy at all, so the direct path
  // alone reached 14-20 GB/s against 31-46 GB/s through the ring, and every share tried (10-50%)
  // was no faster than the ring alone. It stays for hosts where pinning is cheap.
  direct_mode direct_from_page_cache = direct_mode::off;
  std::string local_file;  // empty: the source is not known to be a local file (ring path)
  double direct_fraction = 1;
  // Bytes pinned per registration (a multiple of 4 KiB), and the most pinned at once; 0 for the
  // latter means slot_count * slot_bytes, the ring's own bound. Threads pinning and copying.
  std::size_t direct_chunk_bytes = 32u << 20;
  std::size_t direct_pinned_bytes = 0;
  unsigned direct_threads = 4;
};

// A ring of `slot_count` pinned slots able to hold reads of `slot_bytes` (each slot is one page
// larger, see device_load_options). Fails with errc::no_device without a GPU, errc::cuda when the
// memory cannot be pinned.
result<std::unique_ptr<lease_ring>> make_pinned_ring(std::size_t slot_count, std::size_t slot_bytes);

// Where the time went. The per-stage figures are summed over the readers (worker-seconds), so
// they can exceed total_s; total_s is wall time from the call to every byte on the device.
struct device_load_timings {
  double prepare_s = 0;    // planning, the header pass of split tensors, allocations
  double read_s = 0;       // in source reads
  double verify_s = 0;     // hashing
  double decrypt_s = 0;    // decrypting in place
  double upload_s = 0;     // enqueuing copies (cudaMemcpyAsync and its completion event)
  double h2d_wait_s = 0;   // waiting for a free slot (uploads still reading them) and the final drain
  double register_s = 0;   // direct path: pinning and unpinning page-cache chunks (its own threads)
  double total_s = 0;
};

// Tensors loaded onto one device: one device allocation, tensors at device_align_bytes offsets.
// Move-only through the buffer's shared ownership: DLPack exports keep the allocation alive after
// this object is gone.
class device_tensors {
 public:
  std::size_t size() const noexcept { return entries_.size(); }
  // The i-th tensor of this load (file order).
  const format::tensor_entry& entry(std::size_t i) const noexcept { return entries_[i]; }
  std::uint64_t device_offset(std::size_t i) const noexcept { return offsets_[i]; }
  // deserialized_bytes: what the tensor occupies on the device (zeros for meta tensors).
  std::uint64_t size_bytes(std::size_t i) const noexcept { return entries_[i].deserialized_bytes; }
  // A device address (never dereference it on the host); null for an empty load.
  void* data(std::size_t i) const noexcept;
  std::optional<std::size_t> find(std::string_view name) const noexcept;
  int device() const noexcept { return buffer_ ? buffer_->device() : -1; }
  const cuda::device_buffer& buffer() const noexcept { return *buffer_; }

  const device_load_timings& timings() const noexcept { return timings_; }
  std::uint64_t data_bytes() const noexcept { return data_bytes_; }  // stored bytes uploaded
  std::uint64_t read_bytes() const noexcept { return read_bytes_; }  // bytes read from the source
  std::uint64_t ring_bytes() const noexcept { return ring_bytes_; }  // pinned bytes allocated
  // Most pinned bytes held at once by reads, checks and uploads in flight (<= ring_bytes()).
  std::uint64_t pinned_bytes_max() const noexcept { return pinned_bytes_max_; }
  // Stored bytes copied straight from the page cache (the rest went through the ring);
  // pinned_bytes_max() then adds the most page-cache bytes pinned in place at once.
  std::uint64_t direct_bytes() const noexcept { return direct_bytes_; }
  bool direct_from_page_cache() const noexcept { return direct_bytes_ > 0; }

  // Exports tensor i as a DLPack tensor on its device (kDLCUDA), sharing ownership of the
  // allocation. dtypes: bool, int/uint 8-64, float16/32/64, bfloat16 (kDLBfloat 16), complex
  // 64/128 (and complex32 as kDLComplex 32); float8 variants and bits8 have no DLPack code and are
  // exported as uint8 (reinterpret them by name). Fails with errc::unsupported for other opaque
  // dtypes (and safetensors' packed sub-byte types), errc::invalid_argument for a bad index.
  result<cuda::managed_tensor_ptr> to_dlpack(std::size_t i) const;

 private:
  friend struct device_load_access;
  std::vector<format::tensor_entry> entries_;
  std::vector<std::uint64_t> offsets_;
  std::shared_ptr<cuda::device_buffer> buffer_;
  device_load_timings timings_;
  std::uint64_t data_bytes_ = 0;
  std::uint64_t read_bytes_ = 0;
  std::uint64_t ring_bytes_ = 0;
  std::uint64_t pinned_bytes_max_ = 0;
  std::uint64_t direct_bytes_ = 0;
};

// The DLPack element type of a .tensors / safetensors dtype (see device_tensors::to_dlpack).
result<DLDataType> dlpack_dtype(const format::dtype_info& dtype);

// Loads tensors `which` (positions in opened.index(); empty: all) of `source` (the source `opened`
// was opened from) onto the uploader's device. Runs on `sched`'s workers; completes when every
// byte is on the device and every copy has completed. Allocates the device memory up front and
// a ring of pinned staging slots for the duration of the load only. Fails with the first error:
// errc::invalid_argument (another source, a bad position, a tensor selected twice), errc::no_device
// / errc::cuda from the CUDA stage (no GPU, out of device or pinned memory), the source's errors,
// errc::format for a header that disagrees with the index, errc::hash_mismatch, errc::crypto
// (missing or wrong key, MAC failure), errc::unsupported (a cipher chunk larger than a slot, a
// stored size differing from the loaded size without encryption). On failure nothing is leaked and
// no copy is in flight.
task<result<device_tensors>> async_load_to_device(scheduler& sched, cuda::uploader& up, const loader& opened,
                                                  std::shared_ptr<byte_source> source, std::vector<std::size_t> which,
                                                  device_load_options options = {});

// The blocking form, for a thread that is not a worker of `sched`.
result<device_tensors> load_to_device(scheduler& sched, cuda::uploader& up, const loader& opened,
                                      std::shared_ptr<byte_source> source, std::vector<std::size_t> which = {},
                                      device_load_options options = {});

}  // namespace tz

// Loading tensors straight into GPU memory: reads land in a bounded ring of pinned staging slots,
// are checked / decrypted there, and are copied to one device allocation on the uploader's streams.
#pragma once

#include "tz/base/byte_source.hpp"
#include "tz/cuda/cuda.hpp"
#include "tz/cuda/dlpack.hpp"
#include "tz/base/error.hpp"
#include "tz/format/encryption.hpp"
#include "tz/format/tensorizer.hpp"
#include "tz/engine/device_context.hpp"
#include "tz/engine/lease_ring.hpp"
#include "tz/engine/loader.hpp"
#include "tz/engine/scheduler.hpp"
#include "tz/base/task.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tz {

// Tensors start at multiples of this in a load's device allocation (what cudaMalloc itself
// guarantees for an allocation, so every tensor is as aligned as if it had its own).
inline constexpr std::uint64_t device_align_bytes = 256;

// A load to device memory: what every load takes (readers, verify, decryption, progress) plus
// the shape of the pinned staging ring it takes from its device_context.
struct device_load_options : load_common_options {
  // The staging ring: slot_count pinned slots of slot_bytes each (plus one page per slot, so that a
  // read lands at its file offset modulo 4 KiB and O_DIRECT applies). It bounds the pinned host
  // memory of a load whatever the model size; slot_bytes is also the largest single read.
  // 4 MiB slots: the slots in use (readers x slot) then fit the host's last-level cache, so the
  // GPU's DMA read of a slot hits the cache the copy into it just filled instead of memory. On
  // H100 hosts (16 cores, 4 GiB warm file, gpu_load_bench) 16 x 4 MiB reached 41-46 GB/s where
  // 16 x 16 MiB reached 34-37 GB/s on the same machines (pinned copy limit 52-55 GB/s); 2-3 MiB
  // slots pay more per copy, 8 MiB and more spill the cache. Cold (O_DIRECT) loads were no slower.
  // 0: automatic (default_slot_count, or verified_slot_count for a verified load).
  std::size_t slot_count = 0;
  std::size_t slot_bytes = default_slot_bytes;

  static constexpr std::size_t default_slot_count = 16;
  static constexpr std::size_t default_slot_bytes = 4u << 20;
  // A verified load hashes each tensor in file order on the workers: with more tensors in flight
  // more cores hash at once (H100 host: 64 x 4 MiB 12.6 GB/s where 16 x 4 MiB gave 8-10).
  static constexpr std::size_t verified_slot_count = 64;
  // Encrypted files: upload the ciphertext as stored and authenticate and decrypt it on the GPU
  // (the secretbox kernels), so that the host's cores only read. Applies when the build has the
  // kernels (not the null build, not the CUDA emulation) and the load does not verify hashes
  // (those are of the plaintext, checked on the host); otherwise the workers decrypt, as for host
  // loads. A chunk whose MAC fails the load with the host path's error; its bytes stay ciphertext.
  bool decrypt_on_device = true;
  // Verified loads: take each tensor's CRC32 on the GPU, behind its copies, so that the host's
  // cores hash only SHA-256 (on an H100 host the CRC32 was about a tenth of the hashing work).
  // Applies when the build has the CRC32 kernels or emulates them (not the null build); the
  // CRC32s are read back and compared after the last copy, with the host path's error.
  bool crc_on_device = true;
  // A remote source (byte_source::read_concurrency) keeps more reads in flight to fill its link;
  // each holds a slot until its bytes arrive, so its ring is as large as a verified load's.
  static constexpr std::size_t remote_slot_count = 64;
  // The slots a load with these options uses (of `source`, when known).
  std::size_t slots() const noexcept {
    return slot_count != 0 ? slot_count : verify ? verified_slot_count : default_slot_count;
  }
  std::size_t slots(const byte_source& source) const noexcept {
    return slot_count == 0 && source.read_concurrency() != 0 ? std::max(remote_slot_count, slots()) : slots();
  }
};

// Tensors loaded onto one device: one device allocation, tensors at device_align_bytes offsets (a
// verified load's CRC32 results, a word per piece read, follow the last tensor in it).
// Move-only through the buffer's shared ownership: DLPack exports keep the allocation alive after
// this object is gone.
class device_tensors {
 public:
  std::size_t size() const noexcept { return entries_.size(); }
  // The i-th tensor of this load (file order).
  const format::tensor_entry& entry(std::size_t i) const noexcept { return entries_[i]; }
  // Its position in the loader's index() (what a front end names it by).
  std::size_t index(std::size_t i) const noexcept { return indices_[i]; }
  std::uint64_t device_offset(std::size_t i) const noexcept { return offsets_[i]; }
  // deserialized_bytes: what the tensor occupies on the device (zeros for meta tensors).
  std::uint64_t size_bytes(std::size_t i) const noexcept { return entries_[i].deserialized_bytes; }
  // A device address (never dereference it on the host); null for an empty load.
  void* data(std::size_t i) const noexcept;
  std::optional<std::size_t> find(std::string_view name) const noexcept;
  int device() const noexcept { return buffer_ ? buffer_->device() : -1; }
  const cuda::device_buffer& buffer() const noexcept { return *buffer_; }

  const load_timings& timings() const noexcept { return timings_; }
  std::uint64_t data_bytes() const noexcept { return data_bytes_; }  // stored bytes uploaded
  std::uint64_t read_bytes() const noexcept { return read_bytes_; }  // bytes read from the source
  std::uint64_t ring_bytes() const noexcept { return ring_bytes_; }  // pinned bytes allocated
  // Most pinned bytes held at once by reads, checks and uploads in flight (<= ring_bytes()).
  std::uint64_t pinned_bytes_max() const noexcept { return pinned_bytes_max_; }
  // Reads the load kept in flight: device_load_options::readers, or the count it chose for 0.
  unsigned readers() const noexcept { return readers_; }

  // Exports tensor i as a DLPack tensor on its device (kDLCUDA), sharing ownership of the
  // allocation. dtypes: bool, int/uint 8-64, float16/32/64, bfloat16 (kDLBfloat 16), complex
  // 64/128 (and complex32 as kDLComplex 32); float8 variants and bits8 have no DLPack code and are
  // exported as uint8 (reinterpret them by name). Fails with errc::unsupported for other opaque
  // dtypes (and safetensors' packed sub-byte types), errc::invalid_argument for a bad index.
  result<cuda::managed_tensor_ptr> to_dlpack(std::size_t i) const;

 private:
  friend struct device_load_access;
  std::vector<format::tensor_entry> entries_;
  std::vector<std::size_t> indices_;
  std::vector<std::uint64_t> offsets_;
  std::shared_ptr<cuda::device_buffer> buffer_;
  load_timings timings_;
  std::uint64_t data_bytes_ = 0;
  std::uint64_t read_bytes_ = 0;
  std::uint64_t ring_bytes_ = 0;
  std::uint64_t pinned_bytes_max_ = 0;
  unsigned readers_ = 0;
};

// The DLPack element type of a .tensors / safetensors dtype (see device_tensors::to_dlpack).
result<DLDataType> dlpack_dtype(const format::dtype_info& dtype);

// Loads tensors `which` (positions in opened.index(); empty: all) onto the context's device,
// reading from the source `opened` was opened from. Runs on `sched`'s workers; completes when every
// byte is on the device and every copy has completed. Takes a pinned ring from `ctx` for the
// load (giving it back at the end) and allocates the device memory, zero-filling meta tensors on
// the streams beside the first copies. Loads may share a context concurrently. Fails with the
// first error: errc::invalid_argument (a bad position, a tensor selected twice), errc::no_device /
// errc::cuda from the CUDA stage (out of device or pinned memory), the source's errors,
// errc::format for a header that disagrees with the index, errc::hash_mismatch, errc::crypto
// (missing or wrong key, MAC failure), errc::unsupported (a cipher chunk larger than a slot, a
// stored size differing from the loaded size without encryption). On failure nothing is leaked and
// no copy is in flight.
task<result<device_tensors>> async_load_to_device(scheduler& sched, device_context& ctx, const loader& opened,
                                                  std::vector<std::size_t> which, device_load_options options = {});

// The blocking form, for a thread that is not a worker of `sched`.
result<device_tensors> load_to_device(scheduler& sched, device_context& ctx, const loader& opened,
                                      std::vector<std::size_t> which = {}, device_load_options options = {});

}  // namespace tz

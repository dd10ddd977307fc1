// The public loading API: open a .tensors / safetensors source, list its tensors, load them to host.
#pragma once

#include "tz/base/byte_observer.hpp"
#include "tz/base/byte_source.hpp"
#include "tz/base/error.hpp"
#include "tz/format/encryption.hpp"
#include "tz/format/shard_index.hpp"
#include "tz/format/tensorizer.hpp"
#include "tz/engine/host_memory.hpp"
#include "tz/engine/load_plan.hpp"
#include "tz/engine/scheduler.hpp"
#include "tz/base/task.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tz {

enum class file_kind { tensorizer, safetensors };

// Where a load is; passed to load_options::on_progress.
struct load_progress {
  std::uint64_t bytes_done = 0;
  std::uint64_t bytes_total = 0;
  std::size_t tensors_done = 0;
  std::size_t tensors_total = 0;
};

// Where the time of a load went. Wall-clock: open_s, prepare_s, transfer_s, total_s. The stage
// figures are worker-seconds summed over the readers (they overlap each other and the transfer,
// so they can exceed it). A load's rate is data bytes / total_s (see loaded_tensors::bytes()).
struct load_timings {
  double open_s = 0;      // reading and parsing the index (at open(); not part of total_s)
  double prepare_s = 0;   // selection, the header pass of split tensors, planning, the destination
  double transfer_s = 0;  // first read issued to every byte in place and checked (device: copied)
  double total_s = 0;     // the load call to the last tensor ready: prepare_s + transfer_s
  double read_s = 0;      // in source reads
  double verify_s = 0;    // hashing
  double decrypt_s = 0;   // decrypting in place
  double upload_s = 0;    // device loads: enqueuing copies
  double wait_s = 0;      // device loads: waiting for a free ring slot, and the final drain of copies
  double ring_s = 0;      // device loads: taking a pinned ring (0 when the context had one idle)
  double alloc_s = 0;     // device loads: allocating the device memory (on a thread of its own, beside the first reads)
};

class load_trace;

// One tensor of a load, handed over as soon as it is ready (load_common_options::on_tensor_ready).
struct tensor_ready {
  std::size_t position = 0;  // its place in the load: file order, as loaded_tensors / device_tensors
  const format::tensor_entry* entry = nullptr;
  std::span<const std::byte> host;  // host loads: its bytes (zeros for a meta tensor)
  void* device_address = nullptr;   // device loads: where it is on the device (never dereference it here)
  // Keeps the tensor's memory alive for whoever holds it, also after a load that failed later:
  // loader-owned host memory, or the device allocation. Null when the memory is the caller's.
  std::shared_ptr<const void> owner;
  double seconds = 0;  // from the load call
};

// What every load takes, whatever its sink (host memory or a device): reads, checks, keys, progress.
struct load_common_options {
  // Reads in flight at once; 0 = automatic (two per worker thread, or what a remote source asks
  // for to fill its link, whichever is more; device loads: at most 3/4 of the ring's slots). Each
  // reader runs on one worker.
  unsigned readers = 0;
  // Check each tensor's stored CRC32 / SHA-256 (.tensors only) on the workers, beside the reads:
  // CRC32 per range on whichever worker holds it, SHA-256 in file order per tensor.
  bool verify = false;
  // Verified loads start split tensors longest first (interleave_split_tensors); false keeps file
  // order. For same-run comparisons in the benchmarks (gpu_load_bench --verify's "file order").
  bool verify_longest_first = true;
  // Opens an encrypted .tensors file (v3, or v4 with the encrypted flag): whole cipher chunks are
  // decrypted in place where they landed by the worker that read them, then verified. Required
  // for encrypted files, refused for plain ones (format/FORMAT.md §3.1).
  std::optional<format::decryption> decryption;
  // Called after each completed range from a worker thread, never concurrently with itself.
  std::function<void(const load_progress&)> on_progress;
  // Records the load's timeline (tz/engine/load_trace.hpp) when set; the caller writes it out.
  std::shared_ptr<load_trace> trace;
  // Tensors as they land: called once per tensor of a whole-tensor load (not of extents) as soon as
  // every byte of it is in place and checked (hashes verified, decrypted; a device load's copy
  // completed), from a worker or copy-completion thread, never concurrently with itself. Keep it
  // short: the load waits. In file order by default (a tensor after every earlier one: the order a
  // forward pass wants); ready_in_file_order = false hands each over as it completes. Nothing is
  // handed over after the load failed, and a tensor handed over is never written again. An
  // exception it throws ends the handovers of that load, not the load. A device load with it checks
  // and decrypts on the host cores, so that no tensor is handed over before its check.
  std::function<void(const tensor_ready&)> on_tensor_ready;
  bool ready_in_file_order = true;
  // Sees every byte of the source in file order as the load reads it (a signed model's digests:
  // signing/): each range before its checks, so the file's own bytes; the bytes no range reads (the
  // file's prefix, tensors left out) read for it. Ranges then keep file order, and each waits for
  // its turn, so the load runs no faster than the observer (one core's SHA-256).
  std::shared_ptr<byte_observer> observe;
};

// A load into host memory (device_load_options is the device sink's).
struct load_options : load_common_options {
  // The target length of a read; 0 = automatic (up to 16 MiB, smaller for small loads so every
  // reader gets work).
  std::uint64_t range_bytes = 0;
  // Loader-owned memory: pre-fault pages not backed by huge pages (on the reading
  // worker, just before each read), and back the memory with transparent huge pages (see
  // host_buffer: far fewer faults; the pages then fault inside the copy, which is faster).
  bool prefault = true;
  bool huge_pages = true;
  // Keep each tensor's parsed header (module index, stored hashes, crypt info) in the
  // result (loaded_tensors::header), for callers that rewrite or describe the file.
  bool keep_headers = false;
};

// The tensors of one load. Owns the memory when the loader allocated it (one allocation per load).
class loaded_tensors {
 public:
  std::size_t size() const noexcept { return views_.size(); }
  // Index-order position i of this load (not the index position).
  const format::tensor_entry& entry(std::size_t i) const noexcept { return *entries_[i]; }
  // Its position in the loader's index() (what a front end names it by).
  std::size_t index(std::size_t i) const noexcept { return static_cast<std::size_t>(entries_[i] - index_base_); }
  // The tensor's bytes: dense C-order, deserialized_bytes long (zeros for meta tensors).
  std::span<const std::byte> data(std::size_t i) const noexcept { return views_[i]; }
  // The loaded tensor with this display name, if it was loaded.
  std::optional<std::size_t> find(std::string_view name) const noexcept;
  // The tensor's parsed header, when the load kept them (load_options::keep_headers, .tensors);
  // null otherwise.
  const format::tensor_header* header(std::size_t i) const noexcept {
    return i < headers_.size() ? &headers_[i] : nullptr;
  }
  const load_timings& timings() const noexcept { return timings_; }
  // Bytes delivered: the tensors' deserialized sizes (meta tensors' zeros included).
  std::uint64_t bytes() const noexcept { return bytes_; }
  // Stored data bytes read from the source: with total_s, the load's rate (as device loads report).
  std::uint64_t data_bytes() const noexcept { return data_bytes_; }
  // Reads the load kept in flight: load_options::readers, or the count it chose for 0.
  unsigned readers() const noexcept { return readers_; }

 private:
  friend struct host_load;
  std::vector<const format::tensor_entry*> entries_;
  const format::tensor_entry* index_base_ = nullptr;  // the loader's index().tensors.data()
  std::vector<std::span<const std::byte>> views_;
  std::vector<format::tensor_header> headers_;
  std::shared_ptr<host_buffer> memory_;  // shared with the tensors handed over as they landed
  load_timings timings_;
  std::uint64_t bytes_ = 0;
  std::uint64_t data_bytes_ = 0;
  unsigned readers_ = 0;
};

// A caller-provided destination: tensor `index` (position in loader::index()) lands in `bytes`,
// which must be exactly its deserialized_bytes long.
struct tensor_destination {
  std::size_t index = 0;
  std::span<std::byte> bytes;
};

// One file of a checkpoint split over several safetensors files.
struct shard_file {
  std::string name;  // as the index names it ("model-00001-of-00002.safetensors"), or the path
  std::shared_ptr<byte_source> source;
};

// Where one shard of a sharded loader lies: its tensors are index().tensors[first_tensor,
// first_tensor + tensor_count), its bytes are offsets [base, base + bytes) of the loader's source
// (the shards back to back in order, each starting on a 4 KiB boundary so O_DIRECT stays aligned).
struct shard_span {
  std::string name;         // shard_file::name
  std::string source_name;  // the shard source's name(), as its own errors say it
  std::uint64_t base = 0;
  std::uint64_t bytes = 0;
  std::size_t first_tensor = 0;
  std::size_t tensor_count = 0;
  std::vector<std::pair<std::string, std::string>> metadata;  // the shard's "__metadata__"
  std::shared_ptr<const byte_source> source;                  // the shard's own source
};

// An opened model file. Cheap to keep; it holds the index and the source. Loads may run one after
// another or concurrently. The scheduler passed to a load must outlive it.
class loader {
 public:
  // Reads and validates the index of `source` (a .tensors file, or safetensors when the magic is
  // absent). Fails with errc::format naming the source and offset, errc::io from the source.
  static task<result<loader>> async_open(std::shared_ptr<byte_source> source);
  // Blocking forms of async_open for non-worker threads: as a result, or throwing tz::exception.
  static result<loader> open(scheduler& sched, std::shared_ptr<byte_source> source);
  static loader open_or_throw(scheduler& sched, std::shared_ptr<byte_source> source);

  // Opens a checkpoint split over several safetensors files as one: the shards' indexes are read
  // concurrently on sched's workers, then form one index (shard order, then file order) over one
  // source that reads each shard's bytes from that shard, so every load plans and reads all
  // shards' tensors in one pipeline. `name` names the whole (the index file, or the files) in
  // messages. With `index` (its weight_map), every tensor must be in the shard it names: fails
  // with errc::format naming the tensor, the shard holding it and the one the index names, for a
  // tensor in the wrong shard, one the index lists that no shard holds, and one a shard holds that
  // the index does not list. Without it, a name held by two shards fails naming both. A shard
  // that is a .tensors file fails with errc::unsupported; its own errors name the shard.
  static task<result<loader>> async_open_shards(scheduler& sched, std::string name, std::vector<shard_file> shards,
                                                std::optional<format::shard_index> index = std::nullopt);
  static result<loader> open_shards(scheduler& sched, std::string name, std::vector<shard_file> shards,
                                    std::optional<format::shard_index> index = std::nullopt);

  file_kind kind() const noexcept { return kind_; }
  const format::file_index& index() const noexcept { return *index_; }
  const byte_source& source() const noexcept { return *source_; }
  // The source itself (for load_to_device; a sharded loader's is the set of its shards).
  std::shared_ptr<byte_source> shared_source() const noexcept { return source_; }
  double open_seconds() const noexcept { return open_s_; }
  // The shards of a sharded checkpoint (async_open_shards), in order; empty for one file.
  std::span<const shard_span> shards() const noexcept {
    return shards_ ? std::span<const shard_span>(*shards_) : std::span<const shard_span>();
  }
  // Position of the tensor with this display name in index().tensors.
  std::optional<std::size_t> find(std::string_view name) const;
  // Positions of the tensors whose entry satisfies `keep`, in file order.
  std::vector<std::size_t> select(const std::function<bool(const format::tensor_entry&)>& keep) const;

  // Loads tensors `which` (positions in index(); empty: all) into one loader-owned allocation.
  // Completes when every selected tensor is in memory (and verified, when asked). Fails with the
  // first error: the source's, a header that disagrees with the index, a hash mismatch
  // (errc::hash_mismatch naming the tensor), errc::unsupported for encrypted data without a stage.
  task<result<loaded_tensors>> async_load(scheduler& sched, std::vector<std::size_t> which,
                                          load_options options = {});
  // Loads into caller memory: no copy, no allocation beyond small headers. Same failures, plus
  // errc::invalid_argument for a destination of the wrong size or an unknown index.
  task<result<load_timings>> async_load_into(scheduler& sched, std::vector<tensor_destination> dst,
                                             load_options options = {});

  // Blocking forms (call from a thread that is not a worker of `sched`), and throwing forms.
  result<loaded_tensors> load(scheduler& sched, std::vector<std::size_t> which = {}, load_options options = {});
  result<load_timings> load_into(scheduler& sched, std::vector<tensor_destination> dst, load_options options = {});
  loaded_tensors load_or_throw(scheduler& sched, std::vector<std::size_t> which = {}, load_options options = {});

  // Reads and parses the headers of tensors `which` (empty: all) in parallel, without their data:
  // the module index and stored hashes live only there. .tensors only (errc::unsupported for
  // safetensors). Same failures as a load's header checks.
  task<result<std::vector<format::tensor_header>>> async_read_headers(scheduler& sched, std::vector<std::size_t> which,
                                                                      unsigned readers = 0) const;
  result<std::vector<format::tensor_header>> read_headers(scheduler& sched, std::vector<std::size_t> which = {}) const;

  // Lazy access: reads only tensor `index` (its header and data in one read) into its own memory.
  task<result<loaded_tensors>> async_load_tensor(scheduler& sched, std::size_t index, load_options options = {});

 private:
  friend struct host_load;
  file_kind kind_ = file_kind::tensorizer;
  std::shared_ptr<byte_source> source_;
  std::shared_ptr<const format::file_index> index_;
  std::shared_ptr<const std::vector<shard_span>> shards_;
  double open_s_ = 0;
};

}  // namespace tz

// Private to engine/: the one load pipeline. A plan of ranges, readers on every worker that read
// each range where a sink puts it, the per-tensor checks (header, decryption, hashes) on the bytes
// where they landed, then the sink's delivery. Host and device loads differ only in their sink.
#pragma once

#include "turnstile.hpp"

#include "tz/base/byte_source.hpp"
#include "tz/crypto/hash.hpp"
#include "tz/format/encryption.hpp"
#include "tz/engine/lease_ring.hpp"
#include "tz/engine/load_plan.hpp"
#include "tz/engine/loader.hpp"
#include "tz/engine/scheduler.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace tz {

using pipeline_clock = std::chrono::steady_clock;

inline std::int64_t nanoseconds_since(pipeline_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(pipeline_clock::now() - t0).count();
}

inline double seconds_of(std::int64_t ns) { return static_cast<double>(ns) * 1e-9; }

// A cipher chunk left sealed by the checks for the device sink to open on the GPU
// (pipeline::decrypt_on_device): its tensor (position in selected), where it lies in that tensor's
// data, its nonce and MAC, the key, and the header its errors name.
struct device_chunk {
  std::uint32_t tensor = 0;
  format::cipher_chunk_ref chunk;
  std::shared_ptr<const crypto::secret_key> key;
  std::shared_ptr<const format::tensor_header> header;
};

// Where one range's bytes are: per plan piece a span (gaps included), and the range's bytes as one
// span when they land contiguously (a lease, loader-owned memory), so a single read fills them.
struct landing {
  std::span<std::byte> whole;
  std::vector<std::span<std::byte>> pieces;
  std::vector<std::byte> side;       // headers and gaps of a scattered range (caller memory)
  lease held;                        // the ring slot holding the bytes, for sinks that stage
  std::vector<device_chunk> sealed;  // decrypt_on_device: the chunks the sink must open
};

// Where a load's bytes go. reserve() and place() run before the read, deliver() after the
// range's checks; all on the reader's worker, concurrently for different ranges.
class sink {
 public:
  virtual ~sink() = default;
  // Room for one more range, taken before the range itself so that a reader holding room never
  // waits on a range that still needs some: a ring slot (suspending while all are out), or none.
  virtual task<result<lease>> reserve() = 0;
  // Fills `where` for range r (where.held is what reserve() gave).
  virtual void place(const load_range& r, landing& where) = 0;
  // The range's bytes are checked: nothing more for host memory; an upload for a device, whose
  // completion returns the lease (moved out of where.held).
  // `index` is the range's position in the plan (for traces).
  virtual result<void> deliver(const load_range& r, landing& where, std::int64_t index) = 0;
  // Completes once everything delivered has arrived (device: every copy in flight completed).
  virtual task<void> drain() = 0;
};

// A tensor split over several ranges: its header (from the header pass), its key, and its hashes:
// a CRC32 per part (any worker, combined at the end; none when crc_on_device) and SHA-256 fed part
// by part in file order.
struct split_state {
  format::tensor_header header;
  std::shared_ptr<const crypto::secret_key> key;  // encrypted files only
  std::vector<std::uint32_t> part_crc;
  std::vector<std::uint64_t> part_bytes;
  std::optional<sha256_hasher> sha;  // verified loads only
  turnstile turns;
};

// Worker-seconds (nanoseconds) per stage, summed over the readers.
struct stage_counters {
  std::atomic<std::int64_t> read_ns{0};
  std::atomic<std::int64_t> verify_ns{0};
  std::atomic<std::int64_t> decrypt_ns{0};
  std::atomic<std::int64_t> upload_ns{0};
  std::atomic<std::int64_t> wait_ns{0};
};

class ready_order;

// A load with a byte_observer (load_common_options::observe): the ranges pass their bytes to it one
// turn each, in file order within each of the observer's chains (observe_bytes.cpp).
struct observed_bytes {
  struct chain {
    turnstile turns;
    std::uint64_t at = 0, end = 0;  // the next offset the observer expects; the chain's end
    std::vector<std::byte> gap;     // bytes read for it alone: the prefix, tensors the load leaves out
  };
  std::vector<std::unique_ptr<chain>> chains;
  std::vector<std::uint32_t> chain_of_range, turn_of_range;  // per plan range (plan_observation)
};

// Everything one load shares between its readers; lives in the load's frame until they are done.
struct pipeline {
  const format::file_index* index = nullptr;
  byte_source* source = nullptr;
  const load_common_options* options = nullptr;
  bool keep_headers = false;  // host loads: load_options::keep_headers
  sink* out = nullptr;
  // Tensors as they land (options->on_tensor_ready): the sink reports each range once it is in
  // place and checked. Null when nobody asked.
  ready_order* ready = nullptr;
  bool with_headers = true;  // .tensors (safetensors: no per-tensor headers, nothing to check)
  bool encrypted = false;
  // Encrypted loads to a device with the secretbox kernels and no verification: the checks parse
  // headers but leave the data sealed (landing::sealed); the sink opens it on the GPU.
  bool decrypt_on_device = false;
  // Verified loads to a device with the CRC32 kernels: the checks hash SHA-256 only and keep every
  // header (headers); the sink computes each data piece's CRC32 on the GPU (device_crc.hpp).
  bool crc_on_device = false;
  std::vector<const format::tensor_entry*> selected;  // file order
  load_plan plan;
  std::vector<std::unique_ptr<split_state>> splits;  // per selected tensor; null unless split
  // Split tensors whose headers the plan does not need (plain, unverified loads): read and checked
  // by run_pipeline beside the data reads, not in a pass before them (a round trip saved remotely).
  std::vector<std::uint32_t> deferred_headers;
  std::vector<format::tensor_header> headers;         // per selected tensor, when kept (keep_headers, crc_on_device)
  std::unique_ptr<observed_bytes> observed;           // options->observe set

  std::atomic<std::size_t> next_range{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::optional<error> first_error;
  stage_counters counters;
  std::atomic<std::uint64_t> bytes_done{0};
  std::atomic<std::size_t> tensors_done{0};
  std::mutex progress_mutex;

  // Records the first error and releases every coroutine waiting for a hashing turn. Any thread.
  void fail(error e) noexcept;
};

// Reads the headers of the selected tensors (p.selected) that will be split, in parallel on up to
// `readers` workers, then plans. Sets p.splits and p.plan; the plan's range sizes come from
// `popts` (with_headers from p). Verified loads interleave split tensors `readers` wide.
task<result<void>> prepare_plan(scheduler& sched, pipeline& p, plan_options popts, unsigned readers);

// Reads and parses the header of every selected tensor (p.selected, .tensors only) into
// p.headers, in parallel on up to `readers` workers: the header pass alone, with no data read.
task<result<void>> read_headers(scheduler& sched, pipeline& p, unsigned readers);

// The selected tensors' stored bytes, headers included (with_headers): what a load reads at least.
std::uint64_t stored_bytes(const pipeline& p) noexcept;

// The reads a load keeps in flight when its caller leaves `readers` at 0: two per worker for a
// local file (one waits on I/O while the other copies), or what a remote source asks for to fill
// its link (byte_source::read_concurrency), whichever is more.
unsigned default_readers(const scheduler& sched, const byte_source& source) noexcept;

// The range size of p's load with `readers` in flight when its caller leaves it at 0 (1-16 MiB, in
// 64 KiB steps): big reads amortise the per-read cost; ~4 ranges per reader balance the workers
// of a local load. A remote read pays a round trip before its first byte, so a remote load takes
// ~2 per reader: half the round trips, while readers that finish early can still take another.
std::uint64_t auto_range_bytes(const pipeline& p, unsigned readers) noexcept;

// Runs `readers` readers (fewer when there are fewer ranges) over p.plan on sched's workers, then
// drains the sink. Completes when every reader is done and everything delivered has arrived,
// whatever failed; the first error, if any, is returned.
task<result<void>> run_pipeline(scheduler& sched, pipeline& p, unsigned readers);

// Observed loads: sizes the observer's chains over the source, puts the plan's ranges in file order
// within each chain and, with several chains and no verification, alternates the chains so that
// they advance side by side; numbers each range's turn in its chain. Before the readers start.
task<result<void>> plan_observation(pipeline& p, unsigned readers);
// Observed loads (p.observed): hands range `index`'s landed bytes, and the bytes before them that
// no range reads, to the observer in file order; waits for the range's turn. Before its checks,
// which decrypt in place: the observer sees the file's bytes.
task<result<void>> observe_range(pipeline& p, const load_range& r, const landing& where, std::size_t index);
// After the last range: each chain's bytes after its last range, then observe->end().
task<result<void>> observe_tail(pipeline& p);

// Checks the tensors of range r where its bytes landed (pipeline_checks.cpp): parses headers,
// decrypts whole chunks, verifies hashes (split tensors: CRC32 per part, SHA-256 in part order).
task<result<void>> check_range(pipeline& p, const load_range& r, landing& where);

}  // namespace tz

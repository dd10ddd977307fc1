// Private to engine/: the state shared by the readers of one load to device memory.
#pragma once

#include "device_turnstile.hpp"

#include "tz/device_load.hpp"
#include "tz/device_plan.hpp"
#include "tz/lease_ring.hpp"
#include "tz/wait_group.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace tz {

using device_clock = std::chrono::steady_clock;

inline std::int64_t nanoseconds_since(device_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(device_clock::now() - t0).count();
}

// A tensor split over several ranges: its header (read by the header pass), its key, and the hash
// state fed part by part in file order.
struct split_tensor {
  format::tensor_header header;
  std::shared_ptr<const crypto::secret_key> key;  // encrypted files only
  std::optional<format::tensor_verifier> verifier;
  turnstile turns;
};

struct device_load_state {
  const format::file_index* index = nullptr;
  byte_source* source = nullptr;
  cuda::uploader* up = nullptr;
  cuda::device_buffer* dst = nullptr;
  const device_load_options* options = nullptr;
  bool with_headers = true;
  bool encrypted = false;
  std::vector<const format::tensor_entry*> selected;  // file order
  device_plan plan;
  std::vector<std::unique_ptr<split_tensor>> splits;  // per selected tensor; null unless split
  lease_ring* ring = nullptr;

  std::atomic<std::size_t> next_range{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::optional<error> first_error;
  wait_group uploads;  // copies in flight; each callback returns its lease, then calls done()

  std::atomic<std::int64_t> read_ns{0};
  std::atomic<std::int64_t> verify_ns{0};
  std::atomic<std::int64_t> decrypt_ns{0};
  std::atomic<std::int64_t> upload_ns{0};
  std::atomic<std::int64_t> wait_ns{0};
  std::atomic<std::size_t> slots_out_max{0};

  // Records the first error and releases every coroutine waiting for a hashing turn. Any thread
  // (also an uploader completion thread: it only takes a short lock and posts).
  void fail(error e) noexcept;
  // Notes how many slots are out right after one was acquired (the high-water mark of pinned use).
  void note_slots_out() noexcept;
};

// Reads, checks, decrypts and uploads range `r` from lease `l` (device_stage.cpp). Completes when
// the copy is enqueued: the lease travels with it and returns to the ring when the copy completes.
task<result<void>> process_range(device_load_state& st, const device_range& r, lease l);

}  // namespace tz

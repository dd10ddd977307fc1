// An in-memory byte source for tests: serves a buffer and injects short reads and failures.
#pragma once

#include "tz/base/byte_source.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace tz {

// A fault planted at a byte offset. It fires on a read attempt whose range contains offset_bytes.
struct injected_fault {
  enum class kind {
    short_read,  // the attempt stops just before offset_bytes (or returns 1 byte if it starts there)
    interrupted, // the attempt fails with EINTR
    again,       // the attempt fails with EAGAIN
    hard,        // the attempt fails with EIO
  };
  std::uint64_t offset_bytes = 0;
  kind what = kind::short_read;
  unsigned times = 1;  // how many attempts it affects before it is spent (hard: forever if 0)
};

// Serves `data` through the same read_fully() loop the file source uses, so faults exercise the
// real resubmit/retry logic. Each attempt yields to the executor first (interleaving concurrent
// reads, as real I/O does). Thread-safe.
class memory_source final : public byte_source {
 public:
  explicit memory_source(std::vector<std::byte> data, std::string name = "memory");
  void inject(injected_fault fault);
  // Largest single attempt; smaller values force many short reads.
  void set_attempt_max_bytes(std::size_t n) noexcept { attempt_max_bytes_ = n; }

  // What version() answers (tests of the cache); empty by default, as for local files.
  void set_version(std::string v) {
    std::lock_guard lock(mutex_);
    version_ = std::move(v);
  }

  // What read_concurrency() answers (tests of the engine's remote default); 0 by default, as for
  // local files.
  void set_read_concurrency(unsigned n) noexcept { read_concurrency_ = n; }
  unsigned read_concurrency() const noexcept override { return read_concurrency_.load(); }

  const std::string& name() const noexcept override { return name_; }
  std::string version() const override {
    std::lock_guard lock(mutex_);
    return version_;
  }
  task<result<std::uint64_t>> size() override;
  task<result<void>> read(std::uint64_t offset_bytes, scatter_list dst) override;

  std::uint64_t attempts() const noexcept { return attempts_.load(); }
  std::uint64_t reads() const noexcept { return reads_.load(); }
  const std::vector<std::byte>& data() const noexcept { return data_; }

 private:
  struct attempt_outcome {
    int error = 0;
    std::size_t limit_bytes = 0;
  };
  attempt_outcome plan_attempt(std::uint64_t offset, std::size_t want);

  std::vector<std::byte> data_;
  std::string name_;
  std::atomic<std::size_t> attempt_max_bytes_{SIZE_MAX};
  mutable std::mutex mutex_;
  std::string version_;
  std::vector<injected_fault> faults_;
  std::atomic<std::uint64_t> attempts_{0};
  std::atomic<std::uint64_t> reads_{0};
  std::atomic<unsigned> read_concurrency_{0};
};

}  // namespace tz

// A source for the tests of tensors as they land (ready_test, cuda_emulation_ready_test): an
// in-memory file whose data reads past a point wait until the test lets them go.
#pragma once

#include "tz/backends/memory_source.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace tz_test {

// A memory source that counts the reads started, and holds every data read (64 KiB or more: not the
// header pass of a verified load) at or past `gate` until open() is called (at most 10 s): a load
// that handed its first tensor over only at its end would keep them waiting the whole time.
class gated_source final : public tz::byte_source {
 public:
  gated_source(std::vector<std::byte> bytes, std::uint64_t gate) : inner_(std::move(bytes), "ready-mem"), gate_(gate) {}
  const std::string& name() const noexcept override { return inner_.name(); }
  tz::task<tz::result<std::uint64_t>> size() override { return inner_.size(); }
  tz::task<tz::result<void>> read(std::uint64_t offset, tz::scatter_list dst) override {
    started.fetch_add(1);
    std::size_t bytes = 0;
    for (const auto& d : dst) bytes += d.size();
    if (offset >= gate_ && bytes >= (64 << 10)) {
      std::unique_lock lock(mutex_);
      if (!cv_.wait_for(lock, std::chrono::seconds(10), [this] { return open_; })) held_too_long = true;
    }
    return inner_.read(offset, dst);
  }
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    cv_.notify_all();
  }
  void close() {
    std::lock_guard lock(mutex_);
    open_ = false;
  }
  std::atomic<std::size_t> started{0};
  std::atomic<bool> held_too_long{false};

 private:
  tz::memory_source inner_;
  std::uint64_t gate_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace tz_test

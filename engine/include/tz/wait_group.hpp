// Waiting for a set of spawned tasks: add() before spawning, done() as each finishes, wait() once.
#pragma once

#include "tz/task.hpp"

#include <cstddef>
#include <memory>
#include <mutex>

namespace tz {

// A counter one coroutine can wait on until it drops to zero. done() may be called from any
// thread; the waiter resumes on its own executor. Bounded: one waiter at a time.
class wait_group {
 public:
  wait_group() = default;
  wait_group(const wait_group&) = delete;
  wait_group& operator=(const wait_group&) = delete;
  ~wait_group();

  void add(std::size_t n = 1);
  void done() noexcept;
  // Completes once the count is zero (immediately if it already is).
  task<void> wait();

 private:
  struct waiter {
    virtual ~waiter() = default;
    virtual void complete() = 0;
  };
  std::mutex mutex_;
  std::size_t count_ = 0;
  std::unique_ptr<waiter> waiter_;
};

}  // namespace tz

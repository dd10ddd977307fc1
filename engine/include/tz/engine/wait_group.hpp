// Waiting for a set of spawned tasks: add() before spawning, done() as each finishes, wait() once.
#pragma once

#include "tz/engine/scheduler.hpp"
#include "tz/base/task.hpp"

#include <boost/asio/co_spawn.hpp>

#include <cstddef>
#include <exception>
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

// Runs `body(k)` (a task<void>) for k in [0, count) as coroutines spread round-robin over sched's
// workers; completes when all have finished. A body that throws reports it through
// on_exception(k, exception_ptr) (on that body's worker) and still counts as finished.
template <class Body, class OnException>
task<void> run_on_workers(scheduler& sched, std::size_t count, Body body, OnException on_exception) {
  wait_group group;
  group.add(count);
  for (std::size_t k = 0; k < count; ++k) {
    boost::asio::co_spawn(sched.worker_executor(static_cast<unsigned>(k % sched.thread_count())), body(k),
                          [&group, &on_exception, k](std::exception_ptr e) {
                            if (e) on_exception(k, e);
                            group.done();
                          });
  }
  co_await group.wait();
}

}  // namespace tz

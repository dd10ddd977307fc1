// The engine's threads: N workers, each running its own io_context (and, lazily, its own io_uring).
#pragma once

#include "tz/base/task.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <atomic>
#include <cstddef>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace tz {

using executor = boost::asio::any_io_executor;

// A fixed set of worker threads. Each worker runs one io_context on one thread, so work spawned on
// worker i (and the io_uring ring that reads for it, see uring_service.hpp) stays on that thread:
// a page-cache read completes as a memcpy on the submitting thread, so spreading reads over the
// workers spreads the copying over the cores. Created by the caller and passed down; no globals.
class scheduler {
 public:
  // Starts `thread_count` workers (0: one per online core). Throws std::system_error if a thread
  // cannot be started.
  explicit scheduler(unsigned thread_count = 0);
  // Stops the workers (work still queued is abandoned: its coroutine frames are destroyed) and joins.
  ~scheduler();
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;

  unsigned thread_count() const noexcept { return static_cast<unsigned>(workers_.size()); }

  // The executor of worker i (i < thread_count()).
  executor worker_executor(unsigned i) const;
  // Worker executors handed out round-robin, for spreading independent tasks.
  executor next_executor() noexcept;
  // True when the calling thread is one of this scheduler's workers.
  bool on_worker() const noexcept;

 private:
  struct worker;
  std::vector<std::unique_ptr<worker>> workers_;
  std::atomic<unsigned> next_{0};
};

// The process's shared scheduler for library front-ends that have no caller to own one (the
// public C++/C facade, the Python module): one worker per core with an io_uring ring each, so a
// second set would only oversubscribe the cores. Created on first use and kept until exit, so
// that loads one after another reuse its workers and rings (never destroyed: joining threads from
// exit handlers of a shared library is fragile; the libraries that hold it are linked -z nodelete
// so that no dlclose unmaps code its workers run). A forked child (multiprocessing, DataLoader
// workers) has none of the parent's threads: it forgets the parent's scheduler (leaked there:
// joining threads that do not exist would hang) and starts its own; objects opened before the
// fork stay bound to the parent's and must not be used in the child. Each shared library holding
// a copy of the engine has its own.
std::shared_ptr<scheduler> shared_scheduler();

// Starts `t` on `ex` and returns a future for its value; an exception escaping the task is
// rethrown by future::get(). Never call get() from a worker of the same scheduler (it would block
// the thread the task may need).
template <class T>
std::future<T> spawn(const executor& ex, task<T> t) {
  return boost::asio::co_spawn(ex, std::move(t), boost::asio::use_future);
}

// Runs `t` on a worker of `sched` and blocks the calling (non-worker) thread until it completes.
template <class T>
T run(scheduler& sched, task<T> t) {
  return spawn(sched.next_executor(), std::move(t)).get();
}

// Drives `t` to completion on a private io_context on the calling thread (for tests and tools
// that have no scheduler). Rethrows an exception escaping the task.
template <class T>
T sync_wait(task<T> t) {
  boost::asio::io_context ctx(1);
  auto fut = boost::asio::co_spawn(ctx, std::move(t), boost::asio::use_future);
  ctx.run();
  return fut.get();
}

}  // namespace tz

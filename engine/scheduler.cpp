// Worker threads of the scheduler: one io_context per thread, kept alive by a work guard.
#include "tz/engine/scheduler.hpp"

#include <boost/asio/executor_work_guard.hpp>

#include <pthread.h>

#include <cassert>
#include <mutex>
#include <new>

namespace tz {

namespace {
// Which scheduler (if any) owns the current thread; lets on_worker() answer without locking.
thread_local const void* current_scheduler = nullptr;
}  // namespace

struct scheduler::worker {
  // Concurrency hint 1: exactly one thread runs this context, so Asio can skip some locking.
  boost::asio::io_context ctx{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard{ctx.get_executor()};
  std::thread thread;
};

scheduler::scheduler(unsigned thread_count) {
  if (thread_count == 0) thread_count = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(thread_count);
  for (unsigned i = 0; i < thread_count; ++i) workers_.push_back(std::make_unique<worker>());
  for (auto& w : workers_) {
    w->thread = std::thread([this, ctx = &w->ctx] {
      current_scheduler = this;
      ctx->run();
      current_scheduler = nullptr;
    });
  }
}

scheduler::~scheduler() {
  for (auto& w : workers_) {
    w->guard.reset();
    w->ctx.stop();
  }
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
  // The io_contexts are destroyed with the workers: their services (io_uring rings) wait for
  // in-flight kernel operations, then abandoned handlers and coroutine frames are destroyed.
}

executor scheduler::worker_executor(unsigned i) const {
  assert(i < workers_.size());
  return workers_[i]->ctx.get_executor();
}

executor scheduler::next_executor() noexcept {
  unsigned i = next_.fetch_add(1, std::memory_order_relaxed) % thread_count();
  return workers_[i]->ctx.get_executor();
}

bool scheduler::on_worker() const noexcept { return current_scheduler == this; }

namespace {

std::mutex shared_mutex;
std::weak_ptr<scheduler> shared_cache;

void forget_shared_in_child() noexcept {
  new (&shared_mutex) std::mutex();  // another thread may have held it at fork time
  new (&shared_cache) std::weak_ptr<scheduler>();
}

}  // namespace

std::shared_ptr<scheduler> shared_scheduler() {
  static const bool registered = ::pthread_atfork(nullptr, nullptr, &forget_shared_in_child) == 0;
  (void)registered;
  std::lock_guard lock(shared_mutex);
  if (auto s = shared_cache.lock()) return s;
  auto s = std::make_shared<scheduler>();
  shared_cache = s;
  return s;
}

}  // namespace tz

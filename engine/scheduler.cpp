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

// The process's scheduler, made by the first caller and kept until exit, like kvikio's default
// thread pool. Before, it lived while some handle held it: a Python or C ABI caller that opens,
// loads and drops a model per call started and joined 16 workers and their io_uring rings on
// every load (on the H100, Python's later loads spent ~8 ms a load outside the engine against
// ~1 ms for wrapping the tensors). Never destroyed: at exit its workers may still wait in the
// kernel, and joining them from a static destructor would order exit behind them.
std::mutex shared_mutex;
std::shared_ptr<scheduler>* shared_kept = nullptr;

void forget_shared_in_child() noexcept {
  new (&shared_mutex) std::mutex();  // another thread may have held it at fork time
  // The parent's workers do not exist in the child; its scheduler is left as it is (joining
  // them would wait forever) and the child makes its own.
  shared_kept = nullptr;
}

}  // namespace

std::shared_ptr<scheduler> shared_scheduler() {
  static const bool registered = ::pthread_atfork(nullptr, nullptr, &forget_shared_in_child) == 0;
  (void)registered;
  std::lock_guard lock(shared_mutex);
  if (!shared_kept) shared_kept = new std::shared_ptr<scheduler>(std::make_shared<scheduler>());
  return *shared_kept;
}

}  // namespace tz

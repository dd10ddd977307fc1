// wait_group: a mutex-protected count and one type-erased waiting handler.
#include "tz/engine/wait_group.hpp"

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>

#include <cassert>

namespace tz {

wait_group::~wait_group() { assert(waiter_ == nullptr && "wait_group destroyed while waited on"); }

void wait_group::add(std::size_t n) {
  std::lock_guard lock(mutex_);
  count_ += n;
}

void wait_group::done() noexcept {
  std::unique_ptr<waiter> w;
  {
    std::lock_guard lock(mutex_);
    assert(count_ > 0);
    if (--count_ == 0) w = std::move(waiter_);
  }
  if (w) w->complete();
}

task<void> wait_group::wait() {
  auto initiation = [this](auto handler) {
    using handler_type = decltype(handler);
    struct impl final : waiter {
      explicit impl(handler_type h) : handler(std::move(h)) {}
      void complete() override {
        // Resume on the waiter's own executor, whichever thread called done().
        auto ex = boost::asio::get_associated_executor(handler);
        boost::asio::post(ex, std::move(handler));
      }
      handler_type handler;
    };
    auto w = std::make_unique<impl>(std::move(handler));
    {
      std::lock_guard lock(mutex_);
      if (count_ > 0) {
        assert(waiter_ == nullptr && "wait_group supports one waiter");
        waiter_ = std::move(w);
        return;
      }
    }
    w->complete();
  };
  co_await boost::asio::async_initiate<decltype(use_task), void()>(std::move(initiation), use_task);
}

}  // namespace tz

// turnstile: a counter and the waiters of future turns, under one mutex; resumption is posted.
#include "turnstile.hpp"

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>

#include <cassert>
#include <vector>

namespace tz {

turnstile::~turnstile() { assert(waiters_.empty() && "turnstile destroyed while waited on"); }

task<bool> turnstile::wait(std::uint32_t turn) {
  auto initiation = [this, turn](auto handler) {
    using handler_type = decltype(handler);
    struct impl final : waiter {
      explicit impl(handler_type h) : handler(std::move(h)) {}
      void complete(bool ok) override {
        // Resume on the waiter's own executor, whichever thread passed the turn.
        auto ex = boost::asio::get_associated_executor(handler);
        boost::asio::post(ex, [h = std::move(handler), ok]() mutable { std::move(h)(ok); });
      }
      handler_type handler;
    };
    auto w = std::make_unique<impl>(std::move(handler));
    bool ready = false;
    bool ok = false;
    {
      std::lock_guard lock(mutex_);
      ready = aborted_ || current_ == turn;
      ok = !aborted_;
      if (!ready) {
        assert(turn > current_ && waiters_.count(turn) == 0 && "a turn is waited on once, before it passes");
        waiters_.emplace(turn, std::move(w));
      }
    }
    if (ready) w->complete(ok);
  };
  co_return co_await boost::asio::async_initiate<decltype(use_task), void(bool)>(std::move(initiation), use_task);
}

void turnstile::pass() noexcept {
  std::unique_ptr<waiter> next;
  {
    std::lock_guard lock(mutex_);
    ++current_;
    auto it = waiters_.find(current_);
    if (it != waiters_.end()) {
      next = std::move(it->second);
      waiters_.erase(it);
    }
  }
  if (next) next->complete(true);
}

void turnstile::abort() noexcept {
  std::vector<std::unique_ptr<waiter>> all;
  {
    std::lock_guard lock(mutex_);
    aborted_ = true;
    for (auto& [turn, w] : waiters_) all.push_back(std::move(w));
    waiters_.clear();
  }
  for (auto& w : all) w->complete(false);
}

}  // namespace tz

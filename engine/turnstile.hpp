// Private to engine/: ordered turns for coroutines, so the parts of a split tensor are hashed in
// file order although their reads complete in any order.
#pragma once

#include "tz/base/task.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace tz {

// Turn k may start once turns 0..k-1 have passed. A waiter suspends (never blocks its thread) and
// resumes on its own executor. abort() releases every waiter, present and future, with false.
class turnstile {
 public:
  turnstile() = default;
  turnstile(const turnstile&) = delete;
  turnstile& operator=(const turnstile&) = delete;
  ~turnstile();

  // Completes with true when it is turn `turn`, with false after abort(). One waiter per turn.
  task<bool> wait(std::uint32_t turn);
  // Ends the current turn and wakes the waiter of the next one, if it is already waiting.
  void pass() noexcept;
  // Wakes every waiter with false; later waits complete at once with false. Any thread.
  void abort() noexcept;

 private:
  struct waiter {
    virtual ~waiter() = default;
    virtual void complete(bool ok) = 0;
  };
  std::mutex mutex_;
  std::uint32_t current_ = 0;
  bool aborted_ = false;
  std::map<std::uint32_t, std::unique_ptr<waiter>> waiters_;
};

}  // namespace tz

// Retry policy helpers shared by the HTTP, S3 and Redis clients: what is retryable, backoff sleeps,
// and the clock that bounds a request's attempts in time (give_up_after, deadline).
#pragma once

#include "tz/base/error.hpp"
#include "tz/backends/net_options.hpp"
#include "tz/base/task.hpp"

#include <chrono>
#include <string>
#include <string_view>

namespace tz::net {

// 5xx and 429 are worth retrying; other statuses are answers.
inline bool retryable_status(unsigned status) noexcept { return status >= 500 || status == 429; }

// Transport failures worth retrying (reset, EOF, timeout); a rejected certificate is not.
inline bool retryable_error(const error& e) noexcept { return e.code == errc::network || e.code == errc::timeout; }

// "10 s", "0.3 s", "1.25 s": a duration for messages.
std::string seconds_text(std::chrono::steady_clock::duration d);

// The time limits of one request across all its attempts (retry_options.give_up_after, .deadline).
// give_up_after is a budget for time lost: each failed attempt spends the time since data last
// moved (its fruitless wait, then the backoff before the next attempt). Waits that end in data,
// however slow, spend nothing, so a transfer that keeps moving is never cut, while one that stalls
// on every attempt, even after a little progress each time, is reported once the budget is gone.
// Shared by the attempts of one request, never by two requests in flight at once.
class request_clock {
 public:
  using clock = std::chrono::steady_clock;
  explicit request_clock(const retry_options& options);

  // Data moved: nothing since is lost yet.
  void progressed() noexcept { quiet_since_ = clock::now(); }
  // An attempt failed: the time since data last moved is spent from give_up_after.
  void attempt_failed() noexcept;
  // When every wait must end, whatever its own timeout; clock::time_point::max() when unbounded.
  clock::time_point limit() const noexcept;
  bool expired() const noexcept { return clock::now() >= limit(); }
  // Names what limit() is, for messages: "give-up limit (20 s lost to failed attempts)" or "deadline (60 s)".
  std::string limit_name() const;
  // Since the request began.
  clock::duration elapsed() const noexcept { return clock::now() - start_; }

 private:
  clock::time_point give_up_at() const noexcept;
  clock::time_point start_;
  clock::time_point quiet_since_;  // the last progress, or the end of the last failed attempt
  clock::duration lost_{};         // spent by failed attempts so far
  std::chrono::milliseconds give_up_after_;
  std::chrono::milliseconds deadline_;
};

// One bounded wait: it ends at the earlier of `timeout` from now (0 = none) and the request's
// limit, and remembers which of the two that is so a timeout error can say what fired. Cheap to
// make (one per socket read): the text is only built by fired().
struct timed_wait {
  std::chrono::steady_clock::time_point started;
  std::chrono::steady_clock::time_point ends;
  std::string_view name;  // a literal: "first-byte timeout"
  std::chrono::milliseconds timeout;
  const request_clock* clipped_by = nullptr;  // set when the request's limit ends the wait first

  timed_wait(std::string_view name, std::chrono::milliseconds timeout, const request_clock* request);
  // "first-byte timeout (10 s) fired after 10 s", or "give-up limit (20 s lost to failed attempts) fired after 3.5 s"
  std::string fired() const;
};

// Sleeps before retry number `attempt` (1-based): exponential from backoff_initial, capped at
// backoff_max, with "equal jitter" (half fixed, half random) so parallel clients spread out.
// retry_after_header, when it holds a number of seconds, raises the delay (still capped).
// The delay itself, in milliseconds (also used by the blocking Redis client).
std::chrono::milliseconds backoff_delay(const retry_options& options, int attempt, std::string_view retry_after_header = {});
// Never sleeps past the request clock's limit (when given).
task<void> backoff_sleep(const retry_options& options, int attempt, std::string_view retry_after_header = {},
                         const request_clock* request = nullptr);

// The closing error of a request that ran out of attempts or time: "<what_failed> after N attempts
// in T s (<why it stopped>), last: <last error>", with the last error's code.
error retries_exhausted(const error& last, const std::string& what_failed, int attempts, const request_clock& request);

}  // namespace tz::net

// Retry helpers (see retry.hpp): backoff delays and sleeps, the request clock, timed waits.
#include "retry.hpp"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <random>

namespace tz::net {
namespace asio = boost::asio;
using std::chrono::milliseconds;

std::string seconds_text(std::chrono::steady_clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  char text[32];
  // Up to two decimals below 10 s, one above, without trailing zeros: "10 s", "2.5 s", "9.87 s".
  std::snprintf(text, sizeof text, "%.*f", s < 10 ? 2 : 1, s);
  std::string out = text;
  if (out.find('.') != std::string::npos) {
    out.erase(out.find_last_not_of('0') + 1);
    if (out.back() == '.') out.pop_back();
  }
  return out + " s";
}

request_clock::request_clock(const retry_options& options)
    : start_(clock::now()), quiet_since_(start_), give_up_after_(options.give_up_after), deadline_(options.deadline) {}

void request_clock::attempt_failed() noexcept {
  const auto now = clock::now();
  lost_ += now - quiet_since_;
  quiet_since_ = now;
}

request_clock::clock::time_point request_clock::give_up_at() const noexcept {
  if (give_up_after_.count() <= 0) return clock::time_point::max();
  return quiet_since_ + std::max<clock::duration>(give_up_after_ - lost_, clock::duration::zero());
}

request_clock::clock::time_point request_clock::limit() const noexcept {
  auto at = give_up_at();
  if (deadline_.count() > 0) at = std::min(at, start_ + deadline_);
  return at;
}

std::string request_clock::limit_name() const {
  if (give_up_at() == limit()) return "give-up limit (" + seconds_text(give_up_after_) + " lost to failed attempts)";
  return "deadline (" + seconds_text(deadline_) + ")";
}

timed_wait::timed_wait(std::string_view name_, milliseconds timeout_, const request_clock* request)
    : started(std::chrono::steady_clock::now()), ends(std::chrono::steady_clock::time_point::max()), name(name_),
      timeout(timeout_) {
  if (timeout.count() > 0) ends = started + timeout;
  if (request && request->limit() < ends) {
    ends = request->limit();
    clipped_by = request;
  }
}

std::string timed_wait::fired() const {
  std::string limit = clipped_by ? clipped_by->limit_name() : std::string(name) + " (" + seconds_text(timeout) + ")";
  return limit + " fired after " + seconds_text(std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - started));
}

milliseconds backoff_delay(const retry_options& options, int attempt, std::string_view retry_after_header) {
  long long cap = options.backoff_max.count();
  long long delay = options.backoff_initial.count() << std::min(attempt - 1, 20);
  delay = std::min<long long>(delay, cap);
  thread_local std::minstd_rand random{std::random_device{}()};
  delay = delay / 2 + static_cast<long long>(random() % static_cast<unsigned long long>(delay / 2 + 1));
  long long seconds = 0;
  auto [end, ec] = std::from_chars(retry_after_header.data(), retry_after_header.data() + retry_after_header.size(), seconds);
  if (ec == std::errc{} && end == retry_after_header.data() + retry_after_header.size())
    delay = std::min(std::max(delay, seconds * 1000), cap);
  return milliseconds(delay);
}

task<void> backoff_sleep(const retry_options& options, int attempt, std::string_view retry_after_header,
                         const request_clock* request) {
  auto until = std::chrono::steady_clock::now() + backoff_delay(options, attempt, retry_after_header);
  if (request) until = std::min(until, request->limit());
  asio::steady_timer timer(co_await asio::this_coro::executor, until);
  boost::system::error_code ignored;
  co_await timer.async_wait(asio::redirect_error(use_task, ignored));
}

error retries_exhausted(const error& last, const std::string& what_failed, int attempts, const request_clock& request) {
  std::string why = request.expired() ? request.limit_name() + " reached" : "retry budget spent";
  return make_error(last.code, what_failed + " after " + std::to_string(attempts) + " attempt" +
                                   (attempts == 1 ? "" : "s") + " in " +
                                   seconds_text(std::chrono::duration_cast<milliseconds>(request.elapsed())) + " (" + why +
                                   "), last: " + last.message);
}

}  // namespace tz::net

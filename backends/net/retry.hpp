// Retry policy helpers shared by the HTTP, S3 and Redis clients: what is retryable, backoff sleeps.
#pragma once

#include "tz/error.hpp"
#include "tz/http_source.hpp"
#include "tz/task.hpp"

#include <string_view>

namespace tz::net {

// 5xx and 429 are worth retrying; other statuses are answers.
inline bool retryable_status(unsigned status) noexcept { return status >= 500 || status == 429; }

// Transport failures worth retrying (reset, EOF, timeout); a rejected certificate is not.
inline bool retryable_error(const error& e) noexcept { return e.code == errc::network || e.code == errc::timeout; }

// Sleeps before retry number `attempt` (1-based): exponential from backoff_initial, capped at
// backoff_max, with "equal jitter" (half fixed, half random) so parallel clients spread out.
// retry_after_header, when it holds a number of seconds, raises the delay (still capped).
task<void> backoff_sleep(const retry_options& options, int attempt, std::string_view retry_after_header = {});

}  // namespace tz::net

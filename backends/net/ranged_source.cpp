// Ranged-GET byte source over http_client (see ranged_source.hpp), plus the retrying exchange.
#include "ranged_source.hpp"

#include "retry.hpp"
#include "parallel.hpp"
#include "scatter.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>

namespace tz::net {
namespace asio = boost::asio;

error status_error(const http_response& response, const request_hooks& hooks, const std::string& what) {
  std::string detail = hooks.describe ? hooks.describe(response) : std::string();
  if (detail.empty()) detail = response.body.substr(0, 200);
  std::string message = what + ": HTTP " + std::to_string(response.status) + (detail.empty() ? "" : " (" + detail + ")");
  auto s = response.status;
  if (s == 401 || s == 403) return make_error(errc::auth, message + ": credentials rejected");
  if (s == 404) return make_error(errc::not_found, message + ": no such object");
  if (s == 412) return make_error(errc::io, message + ": the object changed (ETag no longer matches)");
  if (s == 416) return make_error(errc::invalid_argument, message + ": range not satisfiable");
  return make_error(errc::network, message);
}

task<result<http_response>> exchange_with_retries(http_client& client, const std::function<http_request()>& make,
                                                  const request_hooks& hooks, const retry_options& retry,
                                                  const std::string& what, std::size_t body_limit_bytes) {
  request_clock clock(retry);
  error last;
  std::string retry_after;
  int attempt = 1;
  for (;; ++attempt) {
    if (attempt > 1) co_await backoff_sleep(retry, attempt - 1, retry_after, &clock);
    auto request = make();
    if (hooks.sign) hooks.sign(request);
    auto response = co_await client.exchange(request, body_limit_bytes, &clock);
    if (!response) {
      last = response.error();
      if (!retryable_error(last)) co_return last;
    } else {
      if (!retryable_status(response->status)) co_return response;
      retry_after = std::string(response->header("Retry-After"));
      last = status_error(*response, hooks, what);
    }
    clock.attempt_failed();
    if (attempt >= std::max(1, retry.attempts_max) || clock.expired()) break;
  }
  co_return retries_exhausted(last, what + ": failed", attempt, clock);
}

ranged_source::ranged_source(std::string name, std::shared_ptr<http_client> client, std::string target,
                             http_options options, request_hooks hooks)
    : name_(std::move(name)), client_(std::move(client)), target_(std::move(target)),
      options_(std::move(options)), hooks_(std::move(hooks)) {}

task<result<ranged_source::object_info>> ranged_source::info() {
  {
    std::lock_guard lock(mutex_);
    if (info_) co_return *info_;
  }
  result<object_info> found = object_info{};
  const auto t0 = std::chrono::steady_clock::now();
  if (hooks_.size_by_range_get) {
    // One ranged GET answers the size, the ETag and the head (S3: error responses carry XML).
    const auto last = std::max<std::uint64_t>(options_.head_fetch_bytes, 1) - 1;
    auto make = [this] { return head_get_request(); };
    std::string what = name_ + ": GET bytes=0-" + std::to_string(last);
    auto response = co_await exchange_with_retries(*client_, make, hooks_, options_.retry, what, last + 1);
    if (!response) co_return response.error();
    found = info_from_range(*response);
    if (found) found->head = head_of(*response, *found);
  } else {
    found = co_await info_by_head_and_get();
  }
  if (!found) co_return found.error();
  std::lock_guard lock(mutex_);
  if (!info_) {
    info_ = *found;
    near_.store(std::chrono::steady_clock::now() - t0 < options_.near_round_trip, std::memory_order_relaxed);
  }
  co_return *info_;
}

// HEAD (size, ETag, whether the server offers ranges) and, beside it on a connection of its own, a
// ranged GET of the head: one round trip for both. The GET is tried once and only ever saves round
// trips: whatever goes wrong with it (a server that ignores ranges, a changed ETag) leaves no head.
task<result<ranged_source::object_info>> ranged_source::info_by_head_and_get() {
  // Named, not temporaries: the deferred operations below hold references to them until they run.
  const std::function<http_request()> make_head = [this] {
    http_request request{"HEAD", target_};
    for (const auto& [k, v] : options_.headers) request.headers.push_back({k, v});
    return request;
  };
  const std::function<http_request()> make_get = [this] { return head_get_request(); };
  const std::string what_head = name_ + ": HEAD", what_get = name_ + ": GET head";
  if (options_.head_fetch_bytes == 0) {
    TZ_CO_TRY(response, co_await exchange_with_retries(*client_, make_head, hooks_, options_.retry, what_head));
    co_return info_from_head(response);
  }
  auto once = options_.retry;
  once.attempts_max = 1;
  auto ex = co_await asio::this_coro::executor;
  auto head = asio::co_spawn(ex, exchange_with_retries(*client_, make_head, hooks_, options_.retry, what_head),
                             asio::deferred);
  auto get = asio::co_spawn(ex, exchange_with_retries(*client_, make_get, hooks_, once, what_get, options_.head_fetch_bytes),
                            asio::deferred);
  auto [order, head_thrown, head_response, get_thrown, get_response] =
      co_await asio::experimental::make_parallel_group(std::move(head), std::move(get))
          .async_wait(asio::experimental::wait_for_all(), use_task);
  if (head_thrown) std::rethrow_exception(head_thrown);
  if (get_thrown) std::rethrow_exception(get_thrown);
  if (!head_response) co_return head_response.error();
  TZ_CO_TRY(found, info_from_head(*head_response));
  if (get_response && get_response->status == 206) {
    auto from_get = info_from_range(*get_response);
    if (from_get && from_get->size_bytes == found.size_bytes && from_get->etag == found.etag)
      found.head = head_of(*get_response, found);
  }
  co_return found;
}

http_request ranged_source::head_get_request() const {
  http_request request{"GET", target_};
  request.headers.push_back({"Range", "bytes=0-" + std::to_string(std::max<std::uint64_t>(options_.head_fetch_bytes, 1) - 1)});
  for (const auto& [k, v] : options_.headers) request.headers.push_back({k, v});
  return request;
}

// The head a 206 answer carries, when it is all of it: min(head_fetch_bytes, size) bytes.
std::shared_ptr<const std::string> ranged_source::head_of(const http_response& response, const object_info& found) const {
  const auto want = std::min(options_.head_fetch_bytes, found.size_bytes);
  if (response.status != 206 || want == 0 || response.body.size() != want) return nullptr;
  return std::make_shared<const std::string>(response.body);
}

std::string ranged_source::version() const {
  std::lock_guard lock(mutex_);
  return info_ ? info_->etag : std::string();
}

result<ranged_source::object_info> ranged_source::info_from_head(const http_response& response) const {
  if (response.status != 200) return status_error(response, hooks_, name_ + ": HEAD");
  if (response.header("Accept-Ranges") != "bytes")
    return make_error(errc::unsupported, name_ + ": the server does not offer byte ranges (Accept-Ranges: '" +
                                             std::string(response.header("Accept-Ranges")) + "')");
  return object_info{response.content_length, std::string(response.header("ETag"))};
}

// 206 with "Content-Range: bytes 0-0/<size>", or 416 with "bytes */0" for an empty object.
result<ranged_source::object_info> ranged_source::info_from_range(const http_response& response) const {
  auto range = response.header("Content-Range");
  auto slash = range.rfind('/');
  std::uint64_t size_bytes = 0;
  bool parsed = slash != std::string_view::npos &&
                std::from_chars(range.data() + slash + 1, range.data() + range.size(), size_bytes).ec == std::errc{};
  if ((response.status == 206 || (response.status == 416 && size_bytes == 0)) && parsed)
    return object_info{size_bytes, std::string(response.header("ETag"))};
  if (response.status == 206 || response.status == 200)
    return make_error(errc::network, name_ + ": cannot learn the size from Content-Range '" + std::string(range) + "'");
  return status_error(response, hooks_, name_);
}

task<result<std::uint64_t>> ranged_source::size() {
  TZ_CO_TRY(found, co_await info());
  co_return found.size_bytes;
}

result<void> ranged_source::check_range_response(const http_response& response, std::uint64_t first,
                                                 std::uint64_t length, std::uint64_t size_bytes) const {
  std::string where = name_ + ": range " + std::to_string(first) + "-" + std::to_string(first + length - 1);
  bool whole = first == 0 && length == size_bytes;
  if (response.status == 200 && !whole)
    return make_error(errc::unsupported, where + ": the server ignored the Range header (HTTP 200)");
  if (response.status == 206) {
    std::string expected = "bytes " + std::to_string(first) + "-" + std::to_string(first + length - 1) + "/" +
                           std::to_string(size_bytes);
    if (response.header("Content-Range") != expected)
      return make_error(errc::network, where + ": expected Content-Range '" + expected + "', got '" +
                                           std::string(response.header("Content-Range")) + "'");
  }
  if (!response.body_streamed)
    return make_error(errc::network, where + ": expected " + std::to_string(length) + " body bytes, got Content-Length " +
                                         std::to_string(response.content_length));
  return {};
}

task<result<void>> ranged_source::read_range(std::uint64_t offset_bytes, std::vector<std::span<std::byte>> dst,
                                             std::string etag) {
  const std::uint64_t total = scatter_size(dst);
  std::uint64_t done = 0;
  request_clock clock(options_.retry);
  error last;
  std::string retry_after;
  int attempts = 0, refills = 0, made = 0;
  while (attempts < std::max(1, options_.retry.attempts_max) && (made == 0 || !clock.expired())) {
    if (attempts++ > 0) co_await backoff_sleep(options_.retry, attempts - 1, retry_after, &clock);
    ++made;
    // Resume from the first byte not yet received.
    auto rest = scatter_slice(dst, done, total - done);
    std::uint64_t first = offset_bytes + done, last_byte = offset_bytes + total - 1;
    http_request request{"GET", target_};
    request.headers.push_back({"Range", "bytes=" + std::to_string(first) + "-" + std::to_string(last_byte)});
    if (!etag.empty()) request.headers.push_back({"If-Match", etag});
    for (const auto& [k, v] : options_.headers) request.headers.push_back({k, v});
    if (hooks_.sign) hooks_.sign(request);
    std::uint64_t got = 0;
    auto response = co_await client_->exchange_into(request, rest, got, &clock);
    done += got;
    // Progress refills the budget, but only attempts_max times, so a slow drip cannot go on forever.
    if (got > 0 && refills < options_.retry.attempts_max) {
      ++refills;
      attempts = std::min(attempts, 1);
    }
    if (!response) {
      last = response.error();
      if (!retryable_error(last)) co_return last;
      clock.attempt_failed();
      continue;
    }
    if (retryable_status(response->status)) {
      retry_after = std::string(response->header("Retry-After"));
      last = status_error(*response, hooks_, name_);
      clock.attempt_failed();
      continue;
    }
    if (response->status != 200 && response->status != 206) co_return status_error(*response, hooks_, name_);
    auto info_size = info_->size_bytes;
    co_return check_range_response(*response, first, total - (first - offset_bytes), info_size);
  }
  co_return retries_exhausted(last, name_ + ": reading " + std::to_string(total) + " bytes at offset " +
                                        std::to_string(offset_bytes) + " failed at offset " +
                                        std::to_string(offset_bytes + done),
                              made, clock);
}

task<result<void>> ranged_source::read(std::uint64_t offset_bytes, scatter_list dst) {
  const std::uint64_t total = scatter_size(dst);
  TZ_CO_TRY(found, co_await info());
  if (offset_bytes > found.size_bytes || total > found.size_bytes - offset_bytes)
    co_return make_error(errc::invalid_argument, name_ + ": read of " + std::to_string(total) + " bytes at offset " +
                                                     std::to_string(offset_bytes) + " is past the end (size " +
                                                     std::to_string(found.size_bytes) + ")");
  if (total == 0) co_return result<void>{};
  if (found.head && offset_bytes + total <= found.head->size()) {
    std::size_t at = static_cast<std::size_t>(offset_bytes);
    for (const auto& d : dst) {
      if (!d.empty()) std::memcpy(d.data(), found.head->data() + at, d.size());  // an empty span may be null
      at += d.size();
    }
    co_return result<void>{};
  }
  std::uint64_t parts = std::clamp<std::uint64_t>(total / std::max<std::uint64_t>(options_.split_min_bytes, 1), 1,
                                                  std::max<std::size_t>(options_.connections, 1));
  if (parts == 1) co_return co_await read_range(offset_bytes, scatter_slice(dst, 0, total), found.etag);
  auto ex = co_await asio::this_coro::executor;
  using op_type = decltype(asio::co_spawn(ex, read_range(0, {}, {}), asio::deferred));
  std::vector<op_type> ops;
  const std::uint64_t part_bytes = (total + parts - 1) / parts;
  for (std::uint64_t skip = 0; skip < total; skip += part_bytes) {
    auto length = std::min(part_bytes, total - skip);
    ops.push_back(asio::co_spawn(ex, read_range(offset_bytes + skip, scatter_slice(dst, skip, length), found.etag),
                                 asio::deferred));
  }
  co_return co_await net::all_succeed(std::move(ops));
}

}  // namespace tz::net

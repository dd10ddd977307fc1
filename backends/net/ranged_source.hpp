// The byte_source behind http(s):// and s3:// URLs: HEAD for size/ETag, ranged GETs with If-Match,
// retries that resume where a transfer stopped, and parallel sub-ranges. S3 plugs in request
// signing and error-body decoding through hooks.
#pragma once

#include "http_client.hpp"
#include "tz/backends/net_options.hpp"

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>

namespace tz::net {

struct request_hooks {
  // Adds authentication headers to a request just before each attempt (may be empty).
  std::function<void(http_request&)> sign;
  // Turns an error response into a short explanation ("S3 NoSuchKey: ..."); may be empty.
  std::function<std::string(const http_response&)> describe;
  // Learn the size with "GET Range: bytes=0-0" instead of HEAD (S3: error responses then carry
  // an XML body naming the error code; HEAD answers have no body).
  bool size_by_range_get = false;
};

// Maps a final non-success HTTP status to an error naming what and where.
error status_error(const http_response& response, const request_hooks& hooks, const std::string& what);

// Sends the request built by make() until it gets an answer that is not retryable (any status
// other than 5xx/429) or the retry budget is spent. The last transport error or status is reported.
task<result<http_response>> exchange_with_retries(http_client& client, const std::function<http_request()>& make,
                                                  const request_hooks& hooks, const retry_options& retry,
                                                  const std::string& what, std::size_t body_limit_bytes = 1 << 20);

class ranged_source final : public byte_source {
 public:
  ranged_source(std::string name, std::shared_ptr<http_client> client, std::string target, http_options options,
                request_hooks hooks);

  const std::string& name() const noexcept override { return name_; }
  task<result<std::uint64_t>> size() override;
  task<result<void>> read(std::uint64_t offset_bytes, scatter_list dst) override;
  std::string version() const override;
  // What the first round trip measured (info): reads_in_flight, or near_reads_in_flight for a near source.
  unsigned read_concurrency() const noexcept override {
    return near_.load(std::memory_order_relaxed) ? options_.near_reads_in_flight : options_.reads_in_flight;
  }

 private:
  struct object_info {
    std::uint64_t size_bytes = 0;
    std::string etag;
    std::shared_ptr<const std::string> head;  // the first bytes (http_options::head_fetch_bytes), or null
  };
  task<result<object_info>> info();
  task<result<object_info>> info_by_head_and_get();
  http_request head_get_request() const;
  std::shared_ptr<const std::string> head_of(const http_response& response, const object_info& found) const;
  result<object_info> info_from_head(const http_response& response) const;
  result<object_info> info_from_range(const http_response& response) const;
  task<result<void>> read_range(std::uint64_t offset_bytes, std::vector<std::span<std::byte>> dst,
                                std::string etag);
  result<void> check_range_response(const http_response& response, std::uint64_t first, std::uint64_t length,
                                    std::uint64_t size_bytes) const;

  std::string name_;
  std::shared_ptr<http_client> client_;
  std::string target_;
  http_options options_;
  request_hooks hooks_;
  mutable std::mutex mutex_;
  std::optional<object_info> info_;
  std::atomic<bool> near_{false};  // set by the first info(): it answered within near_round_trip
};

}  // namespace tz::net

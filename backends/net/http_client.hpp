// A keep-alive HTTP/1.1 client for one endpoint (plain or TLS): pooled connections, request/response
// exchange, and response bodies streamed straight into a caller's scatter list. No Beast types here.
#pragma once

#include "tz/base/byte_source.hpp"
#include "tz/base/error.hpp"
#include "tz/base/task.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tz::net {

struct http_header {
  std::string name;
  std::string value;
};

struct http_request {
  std::string method = "GET";
  std::string target = "/";          // percent-encoded path and query
  std::vector<http_header> headers;  // Host and User-Agent are added by the client
  std::span<const std::byte> body;   // sent with Content-Length; must outlive the exchange
};

struct http_response {
  unsigned status = 0;
  std::vector<http_header> headers;
  std::string body;             // small bodies (errors, XML); empty when streamed into spans
  bool body_streamed = false;   // true when the body went into the caller's spans
  std::uint64_t content_length = 0;
  // The value of a header (case-insensitive name), "" when absent.
  std::string_view header(std::string_view name) const noexcept;
};

struct http_endpoint {
  bool tls = false;
  std::string host;  // name or IP literal, used for connect, Host, SNI and certificate checks
  std::uint16_t port = 0;
  std::string connect_host;  // when not empty, connect here instead of host (vhost tests)
  std::string url_prefix() const;  // "https://host:port"
  std::string host_header() const;
};

class request_clock;

struct http_client_options {
  bool verify_peer = true;  // false: accept any certificate (explicit opt-out)
  std::string ca_file;      // PEM bundle; empty: system store (honours SSL_CERT_FILE / SSL_CERT_DIR)
  // Per wait, 0 = none (the meanings of tz::http_options); a request_clock may end a wait earlier.
  std::chrono::milliseconds connect_timeout{5'000};
  std::chrono::milliseconds first_byte_timeout{10'000};
  std::chrono::milliseconds stall_timeout{10'000};
  std::size_t idle_connections_max = 64;
  std::string user_agent = "tensorizer-cpp/0.1";
};

// Connections are bound to the executor of the coroutine that opened them and are only reused by
// coroutines running on that same executor, so several io_contexts can share one client.
class http_client {
 public:
  // Fails with errc::invalid_argument / errc::io when the TLS context cannot be set up (CA file).
  static result<std::shared_ptr<http_client>> create(http_endpoint endpoint, http_client_options options);
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  // Sends request and reads the response; a body of at most body_limit_bytes lands in
  // response.body. Transport failures: errc::network (reset, EOF, refused), errc::timeout, or
  // errc::auth for a rejected server certificate; messages name the URL and the stage, and a
  // timeout names the limit that fired and after how long. When `clock` is given, no wait lasts
  // past its limit and body bytes moved count as its progress.
  task<result<http_response>> exchange(const http_request& request, std::size_t body_limit_bytes = 1 << 20,
                                       request_clock* clock = nullptr);

  // Like exchange, but a 200/206 body whose Content-Length equals scatter_size(dst) is read straight
  // into dst (response.body_streamed). received_bytes counts the body bytes placed in dst so far,
  // also when the transfer fails midway, so the caller can resume. Other bodies are read into
  // response.body (up to 1 MiB) or, for 200/206 of the wrong length, left unread.
  task<result<http_response>> exchange_into(const http_request& request, scatter_list dst,
                                            std::uint64_t& received_bytes, request_clock* clock = nullptr);

  const http_endpoint& endpoint() const noexcept;
  const http_client_options& options() const noexcept;

 private:
  http_client();
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tz::net

// The one Beast/Asio-SSL translation unit: pooled keep-alive HTTP/1.1 connections (plain or TLS),
// request/response exchange, and bodies read straight into the caller's scatter spans.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "http_client.hpp"
#include "http_response_parse.hpp"

#include "resolve.hpp"
#include "retry.hpp"
#include "scatter.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

namespace tz::net {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr auto use_tuple = asio::as_tuple(use_task);
constexpr std::size_t parse_buffer_bytes = 1 << 20;  // SERVERS.md §4: unreserved buffers are 6x slower
constexpr std::size_t send_piece_bytes = 1 << 20;   // request bodies are written in pieces, each under the stall timeout

struct connection {
  asio::any_io_executor executor;
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buffer;
  bool reusable = true;
  std::optional<timed_wait> wait;  // the wait armed last, named in timeout errors

  beast::tcp_stream& lowest() { return plain ? *plain : beast::get_lowest_layer(*secure); }

  // Bounds the next wait by `timeout` (0 = none) and the request clock's limit.
  void arm(std::string_view name, std::chrono::milliseconds timeout, const request_clock* clock) {
    wait.emplace(name, timeout, clock);
    if (wait->ends == std::chrono::steady_clock::time_point::max()) lowest().expires_never();
    else lowest().expires_at(wait->ends);
  }
};

// The endpoints of `host`, resolved by net/resolve.hpp's bounded lookup (a literal needs none).
// The lookup's thread cannot wake this worker's io_context safely (it may be gone by then), so the
// coroutine checks it on a short timer: 0.1 ms, doubling to 5 ms, until it is done or `ends`.
task<result<std::vector<tcp::endpoint>>> resolve_bounded(const asio::any_io_executor& ex, const std::string& host,
                                                         unsigned short port, std::chrono::steady_clock::time_point ends) {
  std::vector<std::string> addresses{host};
  if (!is_numeric_host(host)) {
    auto lookup = start_lookup(host);
    asio::steady_timer timer(ex);
    for (auto step = std::chrono::microseconds(100); !lookup_done(*lookup);
         step = std::min<std::chrono::microseconds>(step * 2, std::chrono::milliseconds(5))) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= ends) co_return make_error(errc::timeout, "resolving " + host);
      timer.expires_at(std::min<std::chrono::steady_clock::time_point>(now + step, ends));
      co_await timer.async_wait(use_tuple);
    }
    TZ_CO_TRY(found, lookup_addresses(*lookup));
    addresses = std::move(found);
  }
  std::vector<tcp::endpoint> endpoints;
  for (const auto& a : addresses) endpoints.emplace_back(asio::ip::make_address(a), port);
  co_return endpoints;
}

}  // namespace

std::string http_endpoint::host_header() const {
  bool default_port = port == (tls ? 443 : 80);
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return default_port ? h : h + ":" + std::to_string(port);
}

std::string http_endpoint::url_prefix() const { return (tls ? "https://" : "http://") + host_header(); }

namespace {

// Idle connections live in a service of the execution context that owns their sockets, so they are
// closed when that context shuts down, and never reused from another (possibly newer) context.
// Clients are told apart by a never-reused id; entries of destroyed clients are dropped lazily.
class idle_connections final : public asio::execution_context::service {
 public:
  static inline asio::execution_context::id id;
  explicit idle_connections(asio::execution_context& context) : service(context) {}

  std::unique_ptr<connection> take(std::uint64_t client) {
    std::lock_guard lock(mutex_);
    auto& list = pools_[client].connections;
    if (list.empty()) return nullptr;
    auto c = std::move(list.back());
    list.pop_back();
    return c;
  }

  void put(std::uint64_t client, const std::shared_ptr<bool>& client_alive, std::unique_ptr<connection> c,
           std::size_t idle_max) {
    std::vector<std::unique_ptr<connection>> dropped;  // destroyed outside the lock
    std::lock_guard lock(mutex_);
    for (auto it = pools_.begin(); it != pools_.end();) {
      if (it->second.alive.expired()) {
        for (auto& old : it->second.connections) dropped.push_back(std::move(old));
        it = pools_.erase(it);
      } else {
        ++it;
      }
    }
    auto& pool = pools_[client];
    pool.alive = client_alive;
    if (pool.connections.size() < idle_max) pool.connections.push_back(std::move(c));
    else dropped.push_back(std::move(c));
  }

 private:
  void shutdown() override {
    std::lock_guard lock(mutex_);
    pools_.clear();
  }
  struct pool {
    std::weak_ptr<bool> alive;
    std::vector<std::unique_ptr<connection>> connections;
  };
  std::mutex mutex_;
  std::map<std::uint64_t, pool> pools_;
};

std::atomic<std::uint64_t> next_client_id{1};

}  // namespace

struct http_client::impl {
  http_endpoint endpoint;
  http_client_options options;
  std::optional<ssl::context> tls;
  std::uint64_t id = next_client_id++;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);

  error fail(std::string_view stage, const std::string& target, error_code ec, const connection& c) const {
    std::string where = endpoint.url_prefix() + target + ": " + std::string(stage);
    if (ec == beast::error::timeout && c.wait) return make_error(errc::timeout, where + ": " + c.wait->fired());
    errc code = ec == beast::error::timeout ? errc::timeout : errc::network;
    if (ec.category() == asio::error::get_ssl_category()) code = errc::auth;
    return make_error(code, where + " failed: " + ec.message());
  }

  static idle_connections& idle_of(const asio::any_io_executor& ex) {
    return asio::use_service<idle_connections>(asio::query(ex, asio::execution::context));
  }

  std::unique_ptr<connection> take_idle(const asio::any_io_executor& ex) { return idle_of(ex).take(id); }

  void give_back(std::unique_ptr<connection> c) {
    if (!c || !c->reusable) return;
    auto ex = c->executor;
    idle_of(ex).put(id, alive, std::move(c), options.idle_connections_max);
  }

  task<result<std::unique_ptr<connection>>> connect(const std::string& target, const request_clock* clock);
  template <class Stream>
  task<result<http_response>> run(Stream& stream, connection& c, const http_request& request,
                                  const scatter_list* dst, std::uint64_t* received, std::size_t body_limit,
                                  request_clock* clock);
  task<result<http_response>> exchange(const http_request& request, const scatter_list* dst,
                                       std::uint64_t* received, std::size_t body_limit, request_clock* clock);
};

task<result<std::unique_ptr<connection>>> http_client::impl::connect(const std::string& target,
                                                                     const request_clock* clock) {
  auto ex = co_await asio::this_coro::executor;
  auto c = std::make_unique<connection>();
  c->executor = ex;
  c->buffer.reserve(parse_buffer_bytes);
  if (endpoint.tls) c->secure.emplace(ex, *tls); else c->plain.emplace(ex);
  const auto& host = endpoint.connect_host.empty() ? endpoint.host : endpoint.connect_host;
  // Name resolution gets the connect timeout of its own (a DNS server that never answers).
  c->arm("connect timeout", options.connect_timeout, clock);
  auto endpoints = co_await resolve_bounded(ex, host, endpoint.port, c->wait->ends);
  if (!endpoints && endpoints.error().code == errc::timeout)
    co_return fail("resolving " + host, target, beast::error::timeout, *c);
  if (!endpoints) co_return make_error(endpoints.error().code, endpoint.url_prefix() + target + ": " + endpoints.error().message);
  // One wait for the TCP connect and the TLS handshake together.
  c->arm("connect timeout", options.connect_timeout, clock);
  auto [cec, ep] = co_await c->lowest().async_connect(*endpoints, use_tuple);
  if (cec) co_return fail("connect", target, cec, *c);
  c->lowest().socket().set_option(tcp::no_delay(true));
  if (endpoint.tls) {
    // SNI only for names (RFC 6066); the certificate must match the name or the IP literal.
    if (!is_numeric_host(endpoint.host)) SSL_set_tlsext_host_name(c->secure->native_handle(), endpoint.host.c_str());
    if (options.verify_peer) c->secure->set_verify_callback(ssl::host_name_verification(endpoint.host));
    auto [hec] = co_await c->secure->async_handshake(ssl::stream_base::client, use_tuple);
    if (hec) co_return fail("TLS handshake", target, hec, *c);
  }
  c->lowest().expires_never();
  co_return c;
}

namespace {

// Acknowledges what has arrived at once and leaves delayed-ACK mode until the next send. Servers
// that write a response's header and body separately with Nagle on (Ceph RGW) hold the body until
// the header's ACK arrives, which a request-response socket otherwise delays by ~40 ms: measured
// as 42-48 ms per small ranged GET from RGW on a kept-alive connection, against 1 ms for curl.
// Linux resets the flag by itself, so it is set again before each wait for the server.
void ack_now(beast::tcp_stream& lowest) noexcept {
  const int on = 1;
  static_cast<void>(::setsockopt(lowest.socket().native_handle(), IPPROTO_TCP, TCP_QUICKACK, &on, sizeof on));
}

// Writes the request header, then the body in pieces, each bounded by the stall timeout (a large
// upload that keeps moving is never cut) and counted as the request clock's progress.
template <class Stream>
task<error_code> send_request(Stream& stream, connection& c, const http_request& request,
                              const http_endpoint& endpoint, const http_client_options& options,
                              request_clock* clock) {
  http::request<http::empty_body> req{http::string_to_verb(request.method), request.target, 11};
  req.set(http::field::host, endpoint.host_header());
  req.set(http::field::user_agent, options.user_agent);
  for (const auto& h : request.headers) req.set(h.name, h.value);
  if (!request.body.empty() || request.method == "PUT" || request.method == "POST")
    req.content_length(request.body.size());
  req.keep_alive(true);
  http::request_serializer<http::empty_body> serializer{req};
  c.arm("stall timeout", options.stall_timeout, clock);
  auto [ec, n] = co_await http::async_write_header(stream, serializer, use_tuple);
  for (std::size_t sent = 0; !ec && sent < request.body.size();) {
    auto piece = std::min(send_piece_bytes, request.body.size() - sent);
    c.arm("stall timeout", options.stall_timeout, clock);
    auto [bec, bn] = co_await asio::async_write(stream, asio::buffer(request.body.data() + sent, piece), use_tuple);
    ec = bec;
    sent += bn;
    if (bn > 0 && clock) clock->progressed();
  }
  co_return ec;
}

// Reads a Content-Length body straight into dst: first what the parse buffer already holds, then
// scatter reads from the socket, each bounded by the stall timeout; bytes count as progress.
template <class Stream>
task<error_code> read_body_into(Stream& stream, connection& c, scatter_list dst, std::uint64_t& received,
                                std::chrono::milliseconds stall, request_clock* clock) {
  scatter_cursor cursor(dst);
  auto buffered = c.buffer.data();
  auto n = cursor.copy_in({static_cast<const std::byte*>(buffered.data()), buffered.size()});
  c.buffer.consume(n);
  received += n;
  if (n > 0 && clock) clock->progressed();
  std::vector<asio::mutable_buffer> buffers;
  while (!cursor.done()) {
    cursor.next_buffers<asio::mutable_buffer>(buffers, 16);
    c.arm("stall timeout", stall, clock);
    auto [ec, got] = co_await stream.async_read_some(buffers, use_tuple);
    cursor.advance(got);
    received += got;
    if (got > 0 && clock) clock->progressed();
    if (ec) co_return ec;
  }
  co_return error_code{};
}

}  // namespace

template <class Stream>
task<result<http_response>> http_client::impl::run(Stream& stream, connection& c, const http_request& request,
                                                   const scatter_list* dst, std::uint64_t* received,
                                                   std::size_t body_limit, request_clock* clock) {
  if (auto ec = co_await send_request(stream, c, request, endpoint, options, clock)) {
    c.reusable = false;
    co_return fail("sending " + request.method, request.target, ec, c);
  }
  head_parser parser;
  prepare_head_parser(parser, request.method);
  c.arm("first-byte timeout", options.first_byte_timeout, clock);
  ack_now(c.lowest());
  auto [hec, hn] = co_await http::async_read_header(stream, c.buffer, parser, use_tuple);
  if (hec) {
    c.reusable = false;
    co_return fail("reading the response header of " + request.method, request.target, hec, c);
  }
  http_response response = response_of_head(parser);
  c.reusable = parser.get().keep_alive();
  if (parser.is_done()) co_return response;
  ack_now(c.lowest());  // the header's segment: its ACK may be what the body waits for
  bool ok_status = response.status == 200 || response.status == 206;
  if (dst && ok_status) {
    if (!parser.content_length() || *parser.content_length() != scatter_size(*dst)) {
      c.reusable = false;  // body left unread
      co_return response;
    }
    auto ec = co_await read_body_into(stream, c, *dst, *received, options.stall_timeout, clock);
    if (ec) {
      c.reusable = false;
      co_return fail("reading the body of " + request.method + " at body byte " + std::to_string(*received),
                     request.target, ec, c);
    }
    response.body_streamed = true;
    co_return response;
  }
  if (auto ec = check_body_length(parser, body_limit)) {
    c.reusable = false;  // body left unread
    co_return fail("reading the body of " + request.method, request.target, ec, c);
  }
  string_body_parser body_parser{std::move(parser)};
  prepare_body_parser(body_parser, body_limit);
  // A small body (at most body_limit): one wait for all of it.
  c.arm("stall timeout", options.stall_timeout, clock);
  auto [bec, bn] = co_await http::async_read(stream, c.buffer, body_parser, use_tuple);
  if (bec) {
    c.reusable = false;
    co_return fail("reading the body of " + request.method, request.target, bec, c);
  }
  response.body = std::move(body_parser.get().body());
  co_return response;
}

task<result<http_response>> http_client::impl::exchange(const http_request& request, const scatter_list* dst,
                                                        std::uint64_t* received, std::size_t body_limit,
                                                        request_clock* clock) {
  auto ex = co_await asio::this_coro::executor;
  // A pooled connection may have been closed by the server while idle: when it fails before any
  // response byte arrived, retry once on a fresh connection without charging the caller's budget.
  for (int round = 0;; ++round) {
    auto c = round == 0 ? take_idle(ex) : nullptr;
    bool reused = c != nullptr;
    if (!c) {
      TZ_CO_TRY(fresh, co_await connect(request.target, clock));
      c = std::move(fresh);
    }
    std::uint64_t before = received ? *received : 0;
    // (No co_await inside ?: here: GCC 12 mis-compiles that.)
    result<http_response> r = make_error(errc::network, "unreachable");
    if (c->plain) r = co_await run(*c->plain, *c, request, dst, received, body_limit, clock);
    else r = co_await run(*c->secure, *c, request, dst, received, body_limit, clock);
    bool nothing_arrived = !received || *received == before;
    if (!r && reused && nothing_arrived && r.error().code == errc::network) continue;
    c->lowest().expires_never();
    give_back(std::move(c));
    co_return r;
  }
}

http_client::http_client() : impl_(std::make_unique<impl>()) {}
http_client::~http_client() = default;

result<std::shared_ptr<http_client>> http_client::create(http_endpoint endpoint, http_client_options options) {
  std::shared_ptr<http_client> client(new http_client());
  auto& im = *client->impl_;
  im.endpoint = std::move(endpoint);
  im.options = std::move(options);
  if (im.endpoint.tls) {
    im.tls.emplace(ssl::context::tls_client);
    error_code ec;
    if (!im.options.ca_file.empty()) im.tls->load_verify_file(im.options.ca_file, ec);
    else im.tls->set_default_verify_paths(ec);
    if (ec)
      return make_error(errc::invalid_argument, im.endpoint.url_prefix() + ": cannot load CA certificates '" +
                                                    im.options.ca_file + "': " + ec.message());
    im.tls->set_verify_mode(im.options.verify_peer ? ssl::verify_peer : ssl::verify_none);
  }
  return client;
}

task<result<http_response>> http_client::exchange(const http_request& request, std::size_t body_limit_bytes,
                                                  request_clock* clock) {
  co_return co_await impl_->exchange(request, nullptr, nullptr, body_limit_bytes, clock);
}

task<result<http_response>> http_client::exchange_into(const http_request& request, scatter_list dst,
                                                       std::uint64_t& received_bytes, request_clock* clock) {
  co_return co_await impl_->exchange(request, &dst, &received_bytes, 1 << 20, clock);
}

const http_endpoint& http_client::endpoint() const noexcept { return impl_->endpoint; }
const http_client_options& http_client::options() const noexcept { return impl_->options; }

}  // namespace tz::net

// shaping_proxy: a TCP proxy that makes loopback look like a cloud link (issue 32) for bench/cloud_bench.sh:
// a latency before each response, a per-connection rate cap and an optional cap on the whole link.
//
// usage: shaping_proxy --listen PORT --upstream HOST:PORT [--profile loopback|cloud|far] [--latency-ms N]
//                      [--conn-mbps N] [--link-mbps N] [--threads N] [--stats-file F]
//                      [--fault-every N [--faults reset,503,stall] [--stall-s S]]
// Profiles: loopback (no shaping), cloud (20 ms, 25 MB/s per connection), far (80 ms, 50 MB/s per
// connection, 1000 MB/s link); the other options override the profile's values. MB = 10^6 bytes.
// --listen 0 takes a free port; the startup line names the port taken, so scripts read it from there.
//
// Each client connection gets one upstream connection. Client->upstream bytes pass unshaped.
// Upstream->client bytes: the first upstream bytes after the client sent request bytes (one
// request/response turn on a keep-alive connection) wait the latency; all of them are paced by a
// token bucket per connection and, with a link cap, by one bucket shared by every connection. The
// rule does not parse HTTP, so it holds for any request/response protocol that does not pipeline.
// Faults (the "faults at those conditions"): every Nth request, counted over all connections,
// gets the next kind of --faults in turn: "503" answers it without asking upstream (a GET has no
// body, so the connection stays in step), "reset" passes the first bytes of its response and then
// resets the client's connection (RST), "stall" passes nothing of it for --stall-s seconds, then
// closes. The loader must retry those ranges alone and still load exact bytes.
// The proxy's own ceiling is measured from outside (cloud_bench.sh: curl through the loopback
// profile against curl direct), since a proxy timing itself would share its own bottleneck.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {
namespace asio = boost::asio;
using asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

constexpr std::size_t buffer_bytes = 256 << 10;  // one upstream read (the pipe's size), one client read
constexpr std::size_t conn_depth_bytes = 64 << 10;  // small bursts: a shaped connection never runs ahead by more

struct proxy_config {
  unsigned short listen_port = 0;
  std::string upstream_host, upstream_port;
  std::string profile = "loopback";
  double latency_ms = 0, conn_mbps = 0, link_mbps = 0;  // 0: none
  unsigned threads = 2;
  std::string stats_file;
  unsigned fault_every = 0;  // 0: no faults
  std::vector<std::string> faults{"reset", "503", "stall"};
  double stall_s = 30;
};

// What the proxy moved, written as JSON on exit (--stats-file).
struct proxy_stats {
  std::atomic<std::uint64_t> connections{0}, bytes_down{0}, bytes_up{0}, responses{0}, requests{0};
  std::atomic<std::uint64_t> resets{0}, unavailable{0}, stalls{0};
};

// A token bucket that hands out reservations: taking n bytes may drive the balance negative, and the
// caller waits until it would be back at zero. A late wake-up then costs nothing (the debt is in
// absolute time), and waiters sharing one bucket are served in the order they asked.
class token_bucket {
 public:
  token_bucket(double bytes_per_s, double depth_bytes) : rate_(bytes_per_s), depth_(depth_bytes), tokens_(depth_bytes) {}

  // Takes n bytes; returns how long the caller must wait before sending them.
  clock_type::duration reserve(std::size_t n) {
    const auto now = clock_type::now();
    tokens_ = std::min(depth_, tokens_ + std::chrono::duration<double>(now - last_).count() * rate_);
    last_ = now;
    tokens_ -= static_cast<double>(n);
    if (tokens_ >= 0) return clock_type::duration::zero();
    return std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(-tokens_ / rate_));
  }

 private:
  double rate_, depth_, tokens_;
  clock_type::time_point last_ = clock_type::now();
};

// The link bucket is shared by every connection's strand, hence the lock (held for a few instructions).
class shared_bucket {
 public:
  shared_bucket(double bytes_per_s, double depth_bytes) : bucket_(bytes_per_s, depth_bytes) {}
  clock_type::duration reserve(std::size_t n) {
    std::lock_guard lock(mutex_);
    return bucket_.reserve(n);
  }

 private:
  std::mutex mutex_;
  token_bucket bucket_;
};

// Everything one session needs from the proxy, shared read-only (the stats and link bucket are thread-safe).
struct proxy_shared {
  const proxy_config& config;
  tcp::resolver::results_type upstream;
  proxy_stats& stats;
  std::unique_ptr<shared_bucket> link;  // null without --link-mbps
};

// The pipe a session's response bytes pass through (splice needs a pipe on one side), sized to one
// upstream read. Not open when the process is out of descriptors: the session then just closes.
struct splice_pipe {
  int r = -1, w = -1;
  splice_pipe() {
    int fds[2];
    if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return;
    r = fds[0], w = fds[1];
    ::fcntl(w, F_SETPIPE_SZ, static_cast<int>(buffer_bytes));  // else 64 KiB: more wake-ups, same bytes
  }
  splice_pipe(const splice_pipe&) = delete;
  splice_pipe& operator=(const splice_pipe&) = delete;
  ~splice_pipe() {
    if (r >= 0) ::close(r), ::close(w);
  }
  bool open() const { return r >= 0; }
};

// One client connection and its upstream connection. Both pumps run on one strand, so the turn
// flag and the connection bucket need no lock; each pump holds the session alive.
class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket client, proxy_shared& shared)
      : client_(std::move(client)), upstream_(client_.get_executor()), shared_(shared),
        conn_(shared.config.conn_mbps * 1e6, conn_depth_bytes) {}

  // Connects upstream, then starts both directions; a failed connect closes the client.
  asio::awaitable<void> start() {
    auto [ec, endpoint] = co_await asio::async_connect(upstream_, shared_.upstream, use_tuple);
    if (ec) {
      std::fprintf(stderr, "shaping_proxy: upstream connect failed: %s\n", ec.message().c_str());
      close_both();
      co_return;
    }
    (void)endpoint;
    // Small writes (request headers, the first bytes after the latency) must not wait for Nagle.
    boost::system::error_code ignored;
    client_.set_option(tcp::no_delay(true), ignored);
    upstream_.set_option(tcp::no_delay(true), ignored);
    // splice(2) on the raw descriptors must not block a thread of the io_context.
    client_.native_non_blocking(true, ignored);
    upstream_.native_non_blocking(true, ignored);
    auto self = shared_from_this();
    asio::co_spawn(client_.get_executor(), [self]() { return self->pump_up(); }, asio::detached);
    asio::co_spawn(client_.get_executor(), [self]() { return self->pump_down(); }, asio::detached);
  }

 private:
  // Client -> upstream, unshaped; marks a new turn so the next response waits the latency.
  asio::awaitable<void> pump_up() {
    auto self = shared_from_this();
    std::vector<char> buffer(buffer_bytes);
    boost::system::error_code ec;
    for (;;) {
      std::size_t n = 0, written = 0;
      std::tie(ec, n) = co_await client_.async_read_some(asio::buffer(buffer), use_tuple);
      if (ec) break;
      if (!turn_open_) {  // a new request: maybe a fault's turn
        pending_fault_ = next_fault();
        if (pending_fault_ == "503") {
          pending_fault_.clear();
          ++shared_.stats.unavailable;
          static const std::string busy = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 0\r\n\r\n";
          std::tie(ec, written) = co_await asio::async_write(client_, asio::buffer(busy), use_tuple);
          if (ec) break;
          continue;
        }
      }
      turn_open_ = true;
      std::tie(ec, written) = co_await asio::async_write(upstream_, asio::buffer(buffer.data(), n), use_tuple);
      if (ec) break;
      shared_.stats.bytes_up += written;
    }
    finish_direction(upstream_, ec == asio::error::eof);
  }

  // Upstream -> client: the latency once per turn, then the bytes paced by the buckets. The bytes go
  // through a pipe with splice(2), never through the proxy's memory: on loopback the proxy shares the
  // cores with the server and the client, and a copy in and out of user space would cap the link.
  asio::awaitable<void> pump_down() {
    auto self = shared_from_this();
    asio::steady_timer timer(client_.get_executor());
    const auto latency = std::chrono::duration_cast<clock_type::duration>(
        std::chrono::duration<double, std::milli>(shared_.config.latency_ms));
    bool clean = false;
    while (pipe_.open()) {
      auto [ec] = co_await upstream_.async_wait(tcp::socket::wait_read, use_tuple);
      if (ec) break;
      const ssize_t n = ::splice(upstream_.native_handle(), nullptr, pipe_.w, nullptr, buffer_bytes,
                                 SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n == 0) clean = true;
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;  // woken without data
      if (n <= 0) break;
      if (turn_open_) {
        turn_open_ = false;
        ++shared_.stats.responses;
        if (latency.count() > 0 && !co_await sleep(timer, latency)) break;
        if (!pending_fault_.empty()) {
          co_await inject(timer, static_cast<std::size_t>(n));
          break;
        }
      }
      if (!co_await send_paced(timer, static_cast<std::size_t>(n))) break;
    }
    finish_direction(client_, clean);
  }

  // The kind of fault the next request gets ("" for none): every fault_every-th request over all
  // connections, the kinds in turn.
  std::string next_fault() {
    const auto r = ++shared_.stats.requests;
    const auto& c = shared_.config;
    if (c.fault_every == 0 || r % c.fault_every != 0 || c.faults.empty()) return {};
    return c.faults[(r / c.fault_every) % c.faults.size()];
  }

  // This response's fault, with n bytes of it in the pipe: a reset passes some of them first (so
  // the loader must resume mid-range), a stall passes none; either way the session then ends.
  asio::awaitable<void> inject(asio::steady_timer& timer, std::size_t n) {
    if (pending_fault_ == "reset") {
      ++shared_.stats.resets;
      co_await drain(std::min<std::size_t>(n, 16 << 10));
      boost::system::error_code ignored;
      client_.set_option(asio::socket_base::linger(true, 0), ignored);  // RST, not FIN
    } else {
      ++shared_.stats.stalls;
      co_await sleep(timer, std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(shared_.config.stall_s)));
    }
    close_both();
  }

  // Sends the n bytes waiting in the pipe to the client in chunks no larger than the connection
  // bucket's depth, each after its reservations on the connection and link buckets. Completes with
  // the pipe empty; false when the client is gone.
  asio::awaitable<bool> send_paced(asio::steady_timer& timer, std::size_t n) {
    const bool shaped = shared_.config.conn_mbps > 0 || shared_.link;
    for (std::size_t done = 0; done < n;) {
      const std::size_t chunk = shaped ? std::min(n - done, conn_depth_bytes) : n - done;
      if (shared_.config.conn_mbps > 0 && !co_await sleep(timer, conn_.reserve(chunk))) co_return false;
      // The link reservation is taken once this connection may send, so the link queue is in ready order.
      if (shared_.link && !co_await sleep(timer, shared_.link->reserve(chunk))) co_return false;
      if (!co_await drain(chunk)) co_return false;
      done += chunk;
    }
    co_return true;
  }

  // Moves n bytes from the pipe to the client, waiting whenever the client's socket buffer is full.
  asio::awaitable<bool> drain(std::size_t n) {
    while (n > 0) {
      const ssize_t m = ::splice(pipe_.r, nullptr, client_.native_handle(), nullptr, n, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (m > 0) {
        n -= static_cast<std::size_t>(m);
        shared_.stats.bytes_down += static_cast<std::uint64_t>(m);
      } else if (m < 0 && errno == EAGAIN) {
        auto [ec] = co_await client_.async_wait(tcp::socket::wait_write, use_tuple);
        if (ec) co_return false;
      } else if (!(m < 0 && errno == EINTR)) {
        co_return false;
      }
    }
    co_return true;
  }

  // Waits d (nothing when d is zero); false when the wait was cancelled (the session closing).
  static asio::awaitable<bool> sleep(asio::steady_timer& timer, clock_type::duration d) {
    if (d <= clock_type::duration::zero()) co_return true;
    timer.expires_after(d);
    auto [ec] = co_await timer.async_wait(use_tuple);
    co_return !ec;
  }

  // A direction ended: a clean end (EOF) is passed on as a half-close, since the other side may still
  // be answering; once both ended, or on any error, both sockets close, which also returns the other
  // pump's pending operation.
  void finish_direction(tcp::socket& to, bool clean) {
    boost::system::error_code ignored;
    if (clean) to.shutdown(tcp::socket::shutdown_send, ignored);
    if (++directions_done_ == 2 || !clean) close_both();
  }

  void close_both() {
    boost::system::error_code ignored;
    client_.close(ignored);
    upstream_.close(ignored);
  }

  tcp::socket client_, upstream_;
  splice_pipe pipe_;
  proxy_shared& shared_;
  token_bucket conn_;
  bool turn_open_ = false;
  std::string pending_fault_;  // the fault of the response now due ("reset", "stall" or empty)
  int directions_done_ = 0;
};

asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, proxy_shared& shared) {
  auto& context = static_cast<asio::io_context&>(acceptor.get_executor().context());
  for (;;) {
    // Each connection's sockets live on a strand of their own, so connections spread over the threads.
    auto [ec, client] = co_await acceptor.async_accept(asio::make_strand(context), use_tuple);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) continue;  // e.g. out of descriptors for a moment: keep serving the others
    ++shared.stats.connections;
    auto strand = client.get_executor();
    auto s = std::make_shared<session>(std::move(client), shared);
    asio::co_spawn(strand, [s]() { return s->start(); }, asio::detached);
  }
}

constexpr const char* usage =
    "usage: shaping_proxy --listen PORT --upstream HOST:PORT [--profile loopback|cloud|far] [--latency-ms N]\n"
    "                     [--conn-mbps N] [--link-mbps N] [--threads N] [--stats-file F]\n"
    "                     [--fault-every N [--faults reset,503,stall] [--stall-s S]]\n"
    "  profiles: loopback (no shaping), cloud (20 ms, 25 MB/s per connection),\n"
    "            far (80 ms, 50 MB/s per connection, 1000 MB/s link); options override; MB = 10^6 bytes\n";

// The profile's values; false for an unknown name.
bool apply_profile(proxy_config& c, const std::string& name) {
  c.profile = name;
  if (name == "loopback") c.latency_ms = 0, c.conn_mbps = 0, c.link_mbps = 0;
  else if (name == "cloud") c.latency_ms = 20, c.conn_mbps = 25, c.link_mbps = 0;
  else if (name == "far") c.latency_ms = 80, c.conn_mbps = 50, c.link_mbps = 1000;
  else return false;
  return true;
}

std::vector<std::string> split_kinds(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at <= text.size();) {
    const auto comma = std::min(text.find(',', at), text.size());
    if (comma > at) out.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

std::optional<double> number(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || v < 0) return std::nullopt;
  return v;
}

// Parses argv in two passes, the profile first, so that explicit values override it in any order.
std::optional<proxy_config> parse_args(int argc, char** argv) {
  proxy_config c;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--profile" && !apply_profile(c, argv[i + 1])) return std::nullopt;
  bool have_listen = false;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) return std::nullopt;  // every option takes a value
    const std::string v = argv[++i];
    const auto n = number(v);
    if (k == "--profile") continue;
    if (k == "--stats-file") c.stats_file = v;
    else if (k == "--faults") c.faults = split_kinds(v);
    else if (k == "--upstream") {
      const auto colon = v.rfind(':');
      if (colon == std::string::npos || colon == 0) return std::nullopt;
      c.upstream_host = v.substr(0, colon), c.upstream_port = v.substr(colon + 1);
    } else if (!n) return std::nullopt;
    else if (k == "--listen" && *n < 65536) c.listen_port = static_cast<unsigned short>(*n), have_listen = true;
    else if (k == "--latency-ms") c.latency_ms = *n;
    else if (k == "--conn-mbps") c.conn_mbps = *n;
    else if (k == "--link-mbps") c.link_mbps = *n;
    else if (k == "--threads" && *n >= 1) c.threads = static_cast<unsigned>(*n);
    else if (k == "--fault-every") c.fault_every = static_cast<unsigned>(*n);
    else if (k == "--stall-s") c.stall_s = *n;
    else return std::nullopt;
  }
  for (const auto& f : c.faults)
    if (f != "reset" && f != "503" && f != "stall") return std::nullopt;
  if (!have_listen || c.upstream_host.empty()) return std::nullopt;
  return c;
}

void write_stats(const std::string& path, const proxy_stats& s) {
  if (path.empty()) return;
  std::ofstream out(path);
  out << "{\"connections\":" << s.connections << ",\"bytes_down\":" << s.bytes_down << ",\"bytes_up\":" << s.bytes_up
      << ",\"responses\":" << s.responses << ",\"requests\":" << s.requests << ",\"resets\":" << s.resets
      << ",\"unavailable\":" << s.unavailable << ",\"stalls\":" << s.stalls << "}\n";
  if (!out) std::fprintf(stderr, "shaping_proxy: could not write %s\n", path.c_str());
}

// Serves until SIGTERM/SIGINT, on c.threads threads of one io_context; throws on setup errors
// (an unresolvable upstream, a port taken).
void serve(const proxy_config& c, proxy_stats& stats) {
  asio::io_context context(static_cast<int>(c.threads));
  proxy_shared shared{c, tcp::resolver(context).resolve(c.upstream_host, c.upstream_port), stats, nullptr};
  if (c.link_mbps > 0)  // deep enough that a timer woken ~1 ms late loses no link time
    shared.link = std::make_unique<shared_bucket>(c.link_mbps * 1e6, std::max(64e3 * 16, c.link_mbps * 1e3));
  tcp::acceptor acceptor(context, tcp::endpoint(asio::ip::make_address("127.0.0.1"), c.listen_port));
  asio::signal_set signals(context, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code&, int) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    context.stop();
  });
  asio::co_spawn(context, accept_loop(acceptor, shared), asio::detached);
  std::printf("shaping_proxy: listening on 127.0.0.1:%u -> %s:%s profile=%s latency_ms=%g conn_MBps=%g link_MBps=%g\n",
              static_cast<unsigned>(acceptor.local_endpoint().port()), c.upstream_host.c_str(), c.upstream_port.c_str(),
              c.profile.c_str(), c.latency_ms, c.conn_mbps, c.link_mbps);
  std::fflush(stdout);
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < c.threads; ++i) threads.emplace_back([&] { context.run(); });
  context.run();
  for (auto& t : threads) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  const auto config = parse_args(argc, argv);
  if (!config) {
    std::fputs(usage, stderr);
    return 2;
  }
  // splice(2) into a socket the client closed raises SIGPIPE (it has no MSG_NOSIGNAL); a client
  // that hangs up mid-response (curl killed after a lazy peek) must end its session, not the proxy.
  std::signal(SIGPIPE, SIG_IGN);
  proxy_stats stats;
  try {
    serve(*config, stats);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shaping_proxy: %s\n", e.what());
    return 1;
  }
  write_stats(config->stats_file, stats);
  return 0;
}

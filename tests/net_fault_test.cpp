// net_test suite "faults": the HTTP source against a loopback fake server that resets mid-body,
// answers 503 or 429 before succeeding, stalls, never answers, trickles, or always fails; and the
// time limits of the HTTP and Redis clients (first-byte, stall, give-up limit, deadline).
#include "net_test_support.hpp"

#include "tz/backends/http_source.hpp"
#include "tz/backends/redis_source.hpp"

#include <boost/asio.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

constexpr std::size_t object_bytes = 4 << 20;
constexpr auto trickle_gap = std::chrono::milliseconds(500);
constexpr auto late_answer = std::chrono::milliseconds(400);

// A tiny HTTP/1.1 server on 127.0.0.1 (ephemeral port) with one misbehaviour per path.
class fake_server {
 public:
  fake_server() : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), data_(net_test::pattern_bytes(object_bytes, 3)) {
    asio::co_spawn(io_, accept(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~fake_server() {
    io_.stop();
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()) + path;
  }
  const std::vector<std::byte>& data() const { return data_; }
  std::vector<std::string> ranges(const std::string& path) {
    std::lock_guard lock(mutex_);
    return ranges_[path];
  }

 private:
  asio::awaitable<void> accept() {
    for (;;) {
      auto socket = co_await acceptor_.async_accept(asio::use_awaitable);
      asio::co_spawn(io_, serve(std::move(socket)), asio::detached);
    }
  }

  asio::awaitable<void> serve(tcp::socket socket) {
    std::string buffer;
    try {
      for (;;) {
        auto n = co_await asio::async_read_until(socket, asio::dynamic_buffer(buffer), "\r\n\r\n", asio::use_awaitable);
        std::string head = buffer.substr(0, n);
        buffer.erase(0, n);
        if (!co_await answer(socket, head)) co_return;
      }
    } catch (const std::exception&) {
    }
  }

  // Returns false when the connection must be dropped.
  asio::awaitable<bool> answer(tcp::socket& socket, const std::string& head) {
    std::string method = head.substr(0, head.find(' '));
    std::string path = head.substr(method.size() + 1, head.find(' ', method.size() + 1) - method.size() - 1);
    std::string common = "ETag: \"v1\"\r\nAccept-Ranges: bytes\r\n";
    if (path == "/late") co_await sleep(late_answer);  // an object store's first-byte latency, exaggerated
    if (path == "/silent") {  // reads the request, never answers
      co_await sleep(std::chrono::hours(1));
      co_return false;
    }
    if (method == "HEAD") {
      co_await write(socket, "HTTP/1.1 200 OK\r\n" + common + "Content-Length: " + std::to_string(object_bytes) + "\r\n\r\n");
      co_return true;
    }
    auto at = head.find("Range: bytes=");
    std::uint64_t first = std::stoull(head.substr(at + 13)), last = std::stoull(head.substr(head.find('-', at + 13) + 1));
    int count = 0;
    {
      std::lock_guard lock(mutex_);
      ranges_[path].push_back(std::to_string(first) + "-" + std::to_string(last));
      count = static_cast<int>(ranges_[path].size());
    }
    if (path == "/changes" && head.find("If-Match: \"v1\"") != std::string::npos) {  // replaced since the HEAD
      co_await write(socket, "HTTP/1.1 412 Precondition Failed\r\nETag: \"v2\"\r\nContent-Length: 0\r\n\r\n");
      co_return true;
    }
    if ((path == "/503" && count == 1) || path == "/always503") {
      co_await write(socket, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy");
      co_return true;
    }
    if (path == "/429" && count == 1) {
      co_await write(socket, "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 0\r\nContent-Length: 0\r\n\r\n");
      co_return true;
    }
    std::uint64_t length = last - first + 1;
    co_await write(socket, "HTTP/1.1 206 Partial Content\r\n" + common + "Content-Length: " + std::to_string(length) +
                               "\r\nContent-Range: bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" +
                               std::to_string(object_bytes) + "\r\n\r\n");
    if (path == "/trickle") {  // one byte per trickle_gap: slow, but never silent for long
      for (std::uint64_t i = 0; i < length; ++i) {
        co_await sleep(trickle_gap);
        co_await asio::async_write(socket, asio::buffer(data_.data() + first + i, 1), asio::use_awaitable);
      }
      co_return true;
    }
    bool cut = (path == "/reset" && count <= 2) || path == "/stall";
    std::uint64_t send = cut ? length / 3 : length;
    co_await asio::async_write(socket, asio::buffer(data_.data() + first, send), asio::use_awaitable);
    if (path == "/stall") co_await sleep(std::chrono::hours(1));
    if (cut) {
      socket.set_option(asio::socket_base::linger(true, 0));  // RST, not FIN
      socket.close();
      co_return false;
    }
    co_return true;
  }

  asio::awaitable<void> write(tcp::socket& socket, std::string text) {
    co_await asio::async_write(socket, asio::buffer(text), asio::use_awaitable);
  }

  asio::awaitable<void> sleep(std::chrono::steady_clock::duration d) {
    asio::steady_timer timer(io_, d);
    co_await timer.async_wait(asio::use_awaitable);
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::vector<std::byte> data_;
  std::mutex mutex_;
  std::map<std::string, std::vector<std::string>> ranges_;
  std::thread thread_;
};

// A Redis-protocol peer that accepts connections and reads the commands but never replies.
class silent_redis {
 public:
  silent_redis() : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    asio::co_spawn(io_, accept(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~silent_redis() {
    io_.stop();
    thread_.join();
  }
  std::string url(const std::string& prefix) const {
    return "redis://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()) + "/" + prefix;
  }

 private:
  asio::awaitable<void> accept() {
    for (;;) {
      auto socket = co_await acceptor_.async_accept(asio::use_awaitable);
      asio::co_spawn(io_, drain(std::move(socket)), asio::detached);
    }
  }
  asio::awaitable<void> drain(tcp::socket socket) {
    char buffer[4096];
    try {
      for (;;) co_await socket.async_read_some(asio::buffer(buffer), asio::use_awaitable);
    } catch (const std::exception&) {
    }
  }
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
};

// A Redis-protocol peer that answers every command with a SCAN page of `keys_per_page` new keys
// under "model:" and a cursor that never returns to 0: a listing that would never end.
class endless_scan_redis {
 public:
  explicit endless_scan_redis(std::size_t keys_per_page)
      : keys_per_page_(keys_per_page), acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    asio::co_spawn(io_, accept(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~endless_scan_redis() {
    io_.stop();
    thread_.join();
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()) + "/model"; }

 private:
  asio::awaitable<void> accept() {
    for (;;) {
      auto socket = co_await acceptor_.async_accept(asio::use_awaitable);
      asio::co_spawn(io_, serve(std::move(socket)), asio::detached);
    }
  }
  std::string page() {
    std::string keys;
    for (std::size_t i = 0; i < keys_per_page_; ++i) {
      const std::string key = "model:" + std::to_string(next_key_++);
      keys += "$" + std::to_string(key.size()) + "\r\n" + key + "\r\n";
    }
    return "*2\r\n$1\r\n7\r\n*" + std::to_string(keys_per_page_) + "\r\n" + keys;
  }
  asio::awaitable<void> serve(tcp::socket socket) {
    char buffer[4096];
    try {
      for (;;) {  // one page per read: the client sends one SCAN and waits for its reply
        co_await socket.async_read_some(asio::buffer(buffer), asio::use_awaitable);
        co_await asio::async_write(socket, asio::buffer(page()), asio::use_awaitable);
      }
    } catch (const std::exception&) {
    }
  }
  std::size_t keys_per_page_;
  std::uint64_t next_key_ = 0;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
};

// Generous bound for the time-limit tests: only a hang trips it (the machine is shared and noisy).
constexpr auto hang_guard = std::chrono::seconds(60);

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

tz::http_options quick_options() {
  tz::http_options options;
  options.retry.attempts_max = 4;
  options.retry.backoff_initial = std::chrono::milliseconds(10);
  options.retry.backoff_max = std::chrono::milliseconds(50);
  options.stall_timeout = std::chrono::milliseconds(300);
  options.connections = 1;
  options.head_fetch_bytes = 0;  // these tests count a read's ranged GETs: none beside the HEAD
  return options;
}

tz::result<void> read_all(const tz::http_options& options, const std::string& url, std::vector<std::byte>& out) {
  auto source = tz::open_http_source(options, url);
  REQUIRE(source.has_value());
  out.assign(object_bytes, std::byte{0});
  std::span<std::byte> spans[] = {out};
  return net_test::run((*source)->read(0, spans));
}

}  // namespace

TEST_SUITE("faults") {

TEST_CASE("a connection reset mid-body is retried from the first missing byte") {
  fake_server server;
  std::vector<std::byte> out;
  auto r = read_all(quick_options(), server.url("/reset"), out);
  REQUIRE_MESSAGE(r.has_value(), r.error().message);
  CHECK(out == server.data());
  auto ranges = server.ranges("/reset");
  REQUIRE(ranges.size() == 3);
  CHECK(ranges[0] == "0-" + std::to_string(object_bytes - 1));
  CHECK(ranges[1] != ranges[0]);  // resumed, not restarted
  CHECK(std::stoull(ranges[1]) > 0);
}

TEST_CASE("the head fetched beside the HEAD serves reads inside it; a failed head fetch only costs the round trip") {
  fake_server server;
  auto options = quick_options();
  options.head_fetch_bytes = 320 << 10;
  auto source = tz::open_http_source(options, server.url("/plain"));
  REQUIRE(source.has_value());
  std::vector<std::byte> index(73 + (256 << 10));  // a .tensors file's prefix and index
  std::span<std::byte> spans[] = {index};
  REQUIRE(net_test::run((*source)->read(0, spans)).has_value());
  CHECK(std::equal(index.begin(), index.end(), server.data().begin()));
  CHECK(server.ranges("/plain") == std::vector<std::string>{"0-" + std::to_string((320 << 10) - 1)});
  std::vector<std::byte> beyond(1000);
  std::span<std::byte> more[] = {beyond};
  REQUIRE(net_test::run((*source)->read((320 << 10) - 10, more)).has_value());  // crosses the head's end
  CHECK(std::equal(beyond.begin(), beyond.end(), server.data().begin() + (320 << 10) - 10));
  CHECK(server.ranges("/plain").size() == 2);
  // "/503" answers its first ranged GET (here the head's, tried once) with 503: no head, a full read.
  std::vector<std::byte> out;
  auto r = read_all(options, server.url("/503"), out);
  REQUIRE_MESSAGE(r.has_value(), r.error().message);
  CHECK(out == server.data());
  CHECK(server.ranges("/503").size() == 2);
}

TEST_CASE("the first round trip decides the reads a load keeps in flight: near sources ask for fewer") {
  fake_server server;
  auto options = quick_options();
  options.reads_in_flight = 48;
  options.near_reads_in_flight = 12;
  options.near_round_trip = std::chrono::milliseconds(250);  // far below "/late"'s 400 ms, far above a loaded CI's loopback
  for (const auto& [path, expected] : {std::pair{"/plain", 12u}, std::pair{"/late", 48u}}) {
    CAPTURE(path);
    auto source = tz::open_http_source(options, server.url(path));
    REQUIRE(source.has_value());
    CHECK((*source)->read_concurrency() == 48);  // nothing measured yet: an object store's count
    REQUIRE(net_test::run((*source)->size()).has_value());
    CHECK((*source)->read_concurrency() == expected);
  }
}

TEST_CASE("an object replaced between its HEAD and a read fails cleanly, naming it, without retries") {
  fake_server server;
  std::vector<std::byte> out;
  auto r = read_all(quick_options(), server.url("/changes"), out);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == tz::errc::io);
  CHECK_MESSAGE(contains(r.error().message, "the object changed"), r.error().message);
  CHECK_MESSAGE(contains(r.error().message, server.url("/changes")), r.error().message);
  CHECK(server.ranges("/changes").size() == 1);
}

TEST_CASE("503 and 429 answers are retried and the read then succeeds") {
  fake_server server;
  for (const char* path : {"/503", "/429"}) {
    std::vector<std::byte> out;
    auto r = read_all(quick_options(), server.url(path), out);
    REQUIRE_MESSAGE(r.has_value(), r.error().message);
    CHECK(out == server.data());
    CHECK(server.ranges(path).size() == 2);
  }
}

TEST_CASE("a stalled body fails with a timeout naming the URL, offset and attempts, after a bounded number") {
  fake_server server;
  auto options = quick_options();
  options.retry.attempts_max = 2;
  std::vector<std::byte> out;
  auto r = read_all(options, server.url("/stall"), out);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == tz::errc::timeout);
  CHECK(r.error().message.find(server.url("/stall")) != std::string::npos);
  CHECK(r.error().message.find("offset 0") != std::string::npos);
  // Every attempt makes progress (a third of the body, then a stall), and progress refills the budget
  // at most attempts_max times: so at most 2 x attempts_max requests, each ended by the stall timeout.
  // Counted, not timed: a wall-clock bound flakes on a loaded machine.
  const auto made = server.ranges("/stall").size();
  CHECK(made > static_cast<std::size_t>(options.retry.attempts_max));  // the refills did happen
  CHECK(made <= static_cast<std::size_t>(2 * options.retry.attempts_max));
  CHECK(r.error().message.find("after " + std::to_string(made) + " attempts") != std::string::npos);
}

TEST_CASE("a server that keeps answering 503 exhausts the retry budget with a clear error") {
  fake_server server;
  std::vector<std::byte> out;
  auto r = read_all(quick_options(), server.url("/always503"), out);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == tz::errc::network);
  CHECK(r.error().message.find("503") != std::string::npos);
  CHECK(r.error().message.find("4 attempts") != std::string::npos);
  CHECK(server.ranges("/always503").size() == 4);
}

// Short limits so these run in seconds; the defaults are checked by hand (docs/cli.md, `tensorizer load`).
tz::http_options short_limits() {
  auto options = quick_options();
  options.first_byte_timeout = std::chrono::seconds(1);
  options.stall_timeout = std::chrono::seconds(1);
  options.retry.give_up_after = std::chrono::milliseconds(0);
  return options;
}

TEST_CASE("a server that accepts and never answers fails with the first-byte timeout, naming the URL") {
  fake_server server;
  auto options = short_limits();
  options.retry.attempts_max = 2;
  auto source = tz::open_http_source(options, server.url("/silent"));
  REQUIRE(source.has_value());
  auto start = std::chrono::steady_clock::now();
  auto size = net_test::run((*source)->size());
  CHECK(std::chrono::steady_clock::now() - start < hang_guard);
  REQUIRE_FALSE(size.has_value());
  const auto& message = size.error().message;
  CHECK(size.error().code == tz::errc::timeout);
  CHECK_MESSAGE(contains(message, server.url("/silent") + ": HEAD: failed after 2 attempts"), message);
  CHECK_MESSAGE(contains(message, "first-byte timeout (1 s) fired after 1"), message);
  CHECK_MESSAGE(contains(message, "retry budget spent"), message);
}

TEST_CASE("the give-up limit ends the retries against a silent server long before attempts_max") {
  fake_server server;
  auto options = short_limits();
  options.retry.attempts_max = 1000;
  options.retry.give_up_after = std::chrono::milliseconds(2500);
  auto source = tz::open_http_source(options, server.url("/silent"));
  REQUIRE(source.has_value());
  auto start = std::chrono::steady_clock::now();
  auto size = net_test::run((*source)->size());
  CHECK(std::chrono::steady_clock::now() - start < hang_guard);
  REQUIRE_FALSE(size.has_value());
  const auto& message = size.error().message;
  CHECK(size.error().code == tz::errc::timeout);
  CHECK_MESSAGE(contains(message, "give-up limit (2.5 s lost to failed attempts) reached"), message);
  CHECK_MESSAGE(!contains(message, "1000 attempts"), message);
}

TEST_CASE("headers then silence mid-body fails with the stall timeout, naming the URL and offsets") {
  fake_server server;
  auto options = short_limits();
  options.retry.attempts_max = 2;
  std::vector<std::byte> out;
  auto start = std::chrono::steady_clock::now();
  auto r = read_all(options, server.url("/stall"), out);
  CHECK(std::chrono::steady_clock::now() - start < hang_guard);
  REQUIRE_FALSE(r.has_value());
  const auto& message = r.error().message;
  CHECK(r.error().code == tz::errc::timeout);
  CHECK_MESSAGE(contains(message, server.url("/stall") + ": reading " + std::to_string(object_bytes) + " bytes at offset 0 failed at offset "), message);
  CHECK_MESSAGE(contains(message, "reading the body of GET at body byte"), message);
  CHECK_MESSAGE(contains(message, "stall timeout (1 s) fired after 1"), message);
}

TEST_CASE("a server that stalls on every attempt after a little progress is reported at the give-up limit") {
  fake_server server;  // "/stall" resumes each retry where the last one stopped, sends a third, stalls
  auto options = short_limits();
  options.retry.attempts_max = 1000;
  options.retry.give_up_after = std::chrono::milliseconds(2500);
  std::vector<std::byte> out;
  auto start = std::chrono::steady_clock::now();
  auto r = read_all(options, server.url("/stall"), out);
  CHECK(std::chrono::steady_clock::now() - start < hang_guard);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == tz::errc::timeout);
  CHECK_MESSAGE(contains(r.error().message, "give-up limit (2.5 s lost to failed attempts) reached"), r.error().message);
  CHECK(server.ranges("/stall").size() <= 4);  // 1 s stalls until 2.5 s are lost, not 1000 attempts
}

TEST_CASE("a slow but steady transfer outlasting every timeout and the give-up limit is not cut") {
  fake_server server;
  auto options = short_limits();
  options.retry.give_up_after = std::chrono::milliseconds(1500);
  auto source = tz::open_http_source(options, server.url("/trickle"));
  REQUIRE(source.has_value());
  // 8 bytes, one per 500 ms: 4 s of mostly silence, more than the give-up limit and the stall
  // timeout put together, in gaps each shorter than the stall timeout.
  std::vector<std::byte> out(8);
  std::span<std::byte> spans[] = {out};
  auto r = net_test::run((*source)->read(1000, spans));
  REQUIRE_MESSAGE(r.has_value(), r.error().message);
  CHECK(std::equal(out.begin(), out.end(), server.data().begin() + 1000));
  CHECK(server.ranges("/trickle").size() == 1);  // one request: never cut and retried
}

TEST_CASE("the deadline cuts even a transfer that keeps moving") {
  fake_server server;
  auto options = short_limits();
  options.retry.deadline = std::chrono::seconds(1);
  auto source = tz::open_http_source(options, server.url("/trickle"));
  REQUIRE(source.has_value());
  std::vector<std::byte> out(8);
  std::span<std::byte> spans[] = {out};
  auto r = net_test::run((*source)->read(1000, spans));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == tz::errc::timeout);
  CHECK_MESSAGE(contains(r.error().message, "deadline (1 s) reached"), r.error().message);
  CHECK_MESSAGE(contains(r.error().message, "bytes at offset 1000"), r.error().message);
}

TEST_CASE("a Redis server that accepts and never replies fails with the first-byte timeout") {
  silent_redis server;
  tz::redis_options options;
  options.first_byte_timeout = std::chrono::seconds(1);
  options.retry.attempts_max = 2;
  options.retry.backoff_initial = std::chrono::milliseconds(10);
  options.retry.give_up_after = std::chrono::milliseconds(0);
  auto source = tz::open_redis_source(options, server.url("model"));
  REQUIRE(source.has_value());
  auto start = std::chrono::steady_clock::now();
  auto size = net_test::run((*source)->size());
  CHECK(std::chrono::steady_clock::now() - start < hang_guard);
  REQUIRE_FALSE(size.has_value());
  const auto& message = size.error().message;
  CHECK(size.error().code == tz::errc::timeout);
  CHECK_MESSAGE(contains(message, server.url("").substr(0, server.url("").size() - 1)), message);
  CHECK_MESSAGE(contains(message, "failed after 2 attempts"), message);
  CHECK_MESSAGE(contains(message, "first-byte timeout (1 s) fired after 1"), message);
}

TEST_CASE("the give-up limit also bounds the Redis retries") {
  silent_redis server;
  tz::redis_options options;
  options.first_byte_timeout = std::chrono::seconds(1);
  options.retry.attempts_max = 1000;
  options.retry.backoff_initial = std::chrono::milliseconds(10);
  options.retry.give_up_after = std::chrono::milliseconds(2500);
  auto source = tz::open_redis_source(options, server.url("model"));
  REQUIRE(source.has_value());
  auto size = net_test::run((*source)->size());
  REQUIRE_FALSE(size.has_value());
  CHECK(size.error().code == tz::errc::timeout);
  CHECK_MESSAGE(contains(size.error().message, "give-up limit (2.5 s lost to failed attempts) reached"), size.error().message);
}

TEST_CASE("a Redis listing that never ends is refused at its key bound, not scanned forever") {
  endless_scan_redis server(1 << 16);  // 17 pages pass the 2^20-key bound
  tz::redis_options options;
  options.retry.attempts_max = 1;
  auto source = tz::open_redis_source(options, server.url());
  REQUIRE(source.has_value());
  auto start = std::chrono::steady_clock::now();
  auto size = net_test::run((*source)->size());
  CHECK(std::chrono::steady_clock::now() - start < hang_guard);
  REQUIRE_FALSE(size.has_value());
  CHECK_MESSAGE(contains(size.error().message, "1114112 keys after 17 rounds, more than the 1048576"), size.error().message);
}

}  // TEST_SUITE("faults")

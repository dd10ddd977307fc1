// net_test suite "faults": the HTTP source against a loopback fake server that resets mid-body,
// answers 503 or 429 before succeeding, stalls, or always fails.
#include "net_test_support.hpp"

#include "tz/http_source.hpp"

#include <boost/asio.hpp>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

constexpr std::size_t object_bytes = 4 << 20;

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
    bool cut = (path == "/reset" && count <= 2) || path == "/stall";
    std::uint64_t send = cut ? length / 3 : length;
    co_await asio::async_write(socket, asio::buffer(data_.data() + first, send), asio::use_awaitable);
    if (path == "/stall") {
      asio::steady_timer forever(socket.get_executor(), std::chrono::hours(1));
      co_await forever.async_wait(asio::use_awaitable);
    }
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

  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::vector<std::byte> data_;
  std::mutex mutex_;
  std::map<std::string, std::vector<std::string>> ranges_;
  std::thread thread_;
};

tz::http_options quick_options() {
  tz::http_options options;
  options.retry.attempts_max = 4;
  options.retry.backoff_initial = std::chrono::milliseconds(10);
  options.retry.backoff_max = std::chrono::milliseconds(50);
  options.stall_timeout = std::chrono::milliseconds(300);
  options.connections = 1;
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

}  // TEST_SUITE("faults")

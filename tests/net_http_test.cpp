// net_test suite "http": the HTTP/HTTPS range source against the test nginx (scripts/servers/nginx.sh).
#include "net_test_support.hpp"

#include "tz/backends/http_source.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <cstring>
#include <thread>

namespace {

constexpr std::size_t data_bytes = 64ull << 20;

const std::vector<std::byte>& data() {
  static const auto bytes = net_test::pattern_bytes(data_bytes);
  return bytes;
}

// Starts nginx once and places the 64 MiB test file in its document root.
void require_nginx() {
  static bool ready = false;
  if (ready) return;
  net_test::require_server("nginx");
  net_test::ensure_file(net_test::work_dir() + "/nginx/www/data64.bin", data());
  ready = true;
}

std::string http_url(const std::string& path) {
  return "http://127.0.0.1:" + std::to_string(net_test::port_base() + 80) + path;
}
std::string https_url(const std::string& path) {
  return "https://localhost:" + std::to_string(net_test::port_base() + 443) + path;
}
std::string ca_file() { return net_test::work_dir() + "/ca/ca.pem"; }

std::unique_ptr<tz::byte_source> open(const tz::http_options& options, const std::string& url) {
  auto source = tz::open_http_source(options, url);
  REQUIRE_MESSAGE(source.has_value(), source.error().message);
  return std::move(*source);
}

// Reads [offset, offset+length) into three uneven spans and compares with the local bytes.
bool read_matches(tz::byte_source& source, std::uint64_t offset, std::uint64_t length) {
  std::vector<std::byte> out(length);
  auto a = length / 3, b = length / 2;
  std::span<std::byte> spans[] = {{out.data(), a}, {out.data() + a, b - a}, {out.data() + b, length - b}};
  auto r = net_test::run(source.read(offset, spans));
  if (!r) FAIL_CHECK(r.error().message);
  return r && std::memcmp(out.data(), data().data() + offset, length) == 0;
}

}  // namespace

const tz_test::suite_needs http_needs_nginx = net_test::suite_needs_server("http", "nginx");

TEST_SUITE("http") {

TEST_CASE("the size comes from HEAD and whole and partial reads equal the served file") {
  require_nginx();
  tz::http_options options;
  auto source = open(options, http_url("/data64.bin"));
  auto size = net_test::run(source->size());
  REQUIRE(size.has_value());
  CHECK(*size == data_bytes);
  CHECK(read_matches(*source, 0, data_bytes));  // split across 4 connections
  CHECK(read_matches(*source, 1, 1));
  CHECK(read_matches(*source, data_bytes - 7, 7));
  CHECK(read_matches(*source, 12345, 3 << 20));
  options.connections = 1;
  CHECK(read_matches(*open(options, http_url("/data64.bin")), 999, 20 << 20));
}

TEST_CASE("reads past the end and missing files fail with clear errors") {
  require_nginx();
  auto source = open({}, http_url("/data64.bin"));
  std::vector<std::byte> out(10);
  std::span<std::byte> spans[] = {out};
  auto past = net_test::run(source->read(data_bytes - 5, spans));
  REQUIRE_FALSE(past.has_value());
  CHECK(past.error().code == tz::errc::invalid_argument);
  auto missing = open({}, http_url("/no-such-file.bin"));
  auto size = net_test::run(missing->size());
  REQUIRE_FALSE(size.has_value());
  CHECK(size.error().code == tz::errc::not_found);
  CHECK(size.error().message.find("/no-such-file.bin") != std::string::npos);
  CHECK(size.error().message.find("404") != std::string::npos);
}

TEST_CASE("concurrent reads from several coroutines and several threads all return the right bytes") {
  require_nginx();
  auto source = open({}, http_url("/data64.bin"));
  REQUIRE(net_test::run(source->size()).has_value());
  auto worker = [&](std::uint64_t seed, int* failures) {
    boost::asio::io_context io;
    for (int i = 0; i < 8; ++i) {
      boost::asio::co_spawn(io, [&, i]() -> tz::task<void> {
        std::uint64_t length = (1 + (seed * 7 + i) % 5) << 20;
        std::uint64_t offset = ((seed * 13 + i * 977) << 16) % (data_bytes - length);
        std::vector<std::byte> out(length);
        std::span<std::byte> spans[] = {out};
        auto r = co_await source->read(offset, spans);
        if (!r || std::memcmp(out.data(), data().data() + offset, length) != 0) ++*failures;
      }, boost::asio::detached);
    }
    io.run();
  };
  int failures[3] = {};
  std::thread t1(worker, 1, &failures[0]), t2(worker, 2, &failures[1]);
  worker(3, &failures[2]);
  t1.join();
  t2.join();
  CHECK(failures[0] + failures[1] + failures[2] == 0);
}

TEST_CASE("HTTPS verifies the server against the given CA, fails without it, and can opt out") {
  require_nginx();
  tz::http_options with_ca;
  with_ca.ca_file = ca_file();
  auto good = open(with_ca, https_url("/data64.bin"));
  CHECK(read_matches(*good, 0, data_bytes));
  CHECK(read_matches(*good, 4096, 4096));

  tz::http_options system_store;  // the test CA is not in the system store
  system_store.retry.attempts_max = 2;
  auto rejected = net_test::run(open(system_store, https_url("/data64.bin"))->size());
  REQUIRE_FALSE(rejected.has_value());
  CHECK(rejected.error().code == tz::errc::auth);
  CHECK(rejected.error().message.find("certificate") != std::string::npos);

  tz::http_options insecure;
  insecure.verify_peer = false;
  CHECK(read_matches(*open(insecure, https_url("/data64.bin")), 100, 1000));

  auto bad_ca = tz::open_http_source(tz::http_options{.ca_file = "/no/such/ca.pem"}, https_url("/x"));
  CHECK_FALSE(bad_ca.has_value());
}

}  // TEST_SUITE("http")

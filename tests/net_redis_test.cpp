// net_test suite "redis": the Redis virtual-file sink and source against the test redis-server.
#include "net_test_support.hpp"

#include "tz/backends/redis_source.hpp"

#include <cstring>

namespace {

std::string redis_url(const std::string& prefix) {
  return "redis://127.0.0.1:" + std::to_string(net_test::port_base() + 379) + "/" + prefix;
}

// A virtual file of `sizes` consecutive keys with awkward names, written through the sink.
std::vector<std::byte> write_file(const tz::redis_options& options, const std::string& prefix,
                                  const std::vector<std::uint64_t>& sizes) {
  std::uint64_t total = 0;
  for (auto s : sizes) total += s;
  auto bytes = net_test::pattern_bytes(total, 7);
  const char* names[] = {"header", "layer 1.\"weight\"", "\x1e[\"a b\", 'c']", "bias:with:colons", "plain"};
  std::vector<tz::redis_range> ranges;
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    ranges.push_back({names[i % 5] + std::string(i >= 5 ? "#" + std::to_string(i) : ""), at,
                      std::span<const std::byte>(bytes).subspan(at, sizes[i])});
    at += sizes[i];
  }
  auto written = net_test::run(tz::write_virtual_file(options, redis_url(prefix), ranges));
  REQUIRE_MESSAGE(written.has_value(), written.error().message);
  return bytes;
}

}  // namespace

const tz_test::suite_needs redis_needs_redis = net_test::suite_needs_server("redis", "redis");

TEST_SUITE("redis") {

TEST_CASE("a virtual file written with spaces, quotes and colons in key names reads back byte for byte") {
  net_test::require_server("redis");
  tz::redis_options options;
  options.piece_bytes = 4096;  // many pipelined GETRANGE/APPEND pieces
  const std::string prefix = "tz test:\"quoted\" prefix";
  auto bytes = write_file(options, prefix, {300, 10000, 0, 70000, 5, 123456, 1});
  auto source = tz::open_redis_source(options, redis_url(prefix));
  REQUIRE(source.has_value());
  auto size = net_test::run((*source)->size());
  REQUIRE_MESSAGE(size.has_value(), size.error().message);
  CHECK(*size == bytes.size());
  for (auto [offset, length] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{
           {0, bytes.size()}, {299, 2}, {250, 80000}, {bytes.size() - 1, 1}, {10300, 70005}}) {
    std::vector<std::byte> out(length);
    std::span<std::byte> spans[] = {std::span(out).first(length / 2), std::span(out).subspan(length / 2)};
    auto r = net_test::run((*source)->read(offset, spans));
    REQUIRE_MESSAGE(r.has_value(), r.error().message);
    CHECK(std::memcmp(out.data(), bytes.data() + offset, length) == 0);
  }
  std::vector<std::byte> out(10);
  std::span<std::byte> spans[] = {out};
  auto past = net_test::run((*source)->read(bytes.size() - 5, spans));
  REQUIRE_FALSE(past.has_value());
  CHECK(past.error().code == tz::errc::invalid_argument);
}

TEST_CASE("large values are read in parallel pieces across connections") {
  net_test::require_server("redis");
  tz::redis_options options;
  options.piece_bytes = 1 << 20;
  auto bytes = write_file(options, "tz-test-large", {1000, 24u << 20, 3u << 20});
  auto source = tz::open_redis_source(options, redis_url("tz-test-large"));
  REQUIRE(source.has_value());
  std::vector<std::byte> out(bytes.size());
  std::span<std::byte> spans[] = {out};
  auto r = net_test::run((*source)->read(0, spans));
  REQUIRE_MESSAGE(r.has_value(), r.error().message);
  CHECK(out == bytes);
}

TEST_CASE("a prefix without keys and an unreachable server fail with clear errors") {
  net_test::require_server("redis");
  auto missing = tz::open_redis_source({}, redis_url("tz-no-such-prefix"));
  REQUIRE(missing.has_value());
  auto size = net_test::run((*missing)->size());
  REQUIRE_FALSE(size.has_value());
  CHECK(size.error().code == tz::errc::not_found);
  CHECK(size.error().message.find("tz-no-such-prefix") != std::string::npos);

  tz::redis_options quick;
  quick.retry.attempts_max = 2;
  quick.retry.backoff_initial = std::chrono::milliseconds(10);
  auto down = tz::open_redis_source(quick, "redis://127.0.0.1:1/x");
  REQUIRE(down.has_value());
  auto failed = net_test::run((*down)->size());
  REQUIRE_FALSE(failed.has_value());
  CHECK(failed.error().code == tz::errc::network);
  CHECK(failed.error().message.find("2 attempts") != std::string::npos);
  CHECK_FALSE(tz::open_redis_source({}, "redis://127.0.0.1/").has_value());
}

}  // TEST_SUITE("redis")

// net_test suites "s3" (against the test Ceph RGW, scripts/servers/rgw.sh) and "offline" (S3
// credential/endpoint resolution).
#include "net_test_support.hpp"

#include "tz/backends/s3.hpp"

#include <cstring>

namespace {

constexpr std::size_t data_bytes = 64ull << 20;

std::string s3_http_endpoint() { return "http://127.0.0.1:" + std::to_string(net_test::port_base() + 480); }

tz::s3_options rgw_options(const std::string& secret = "TESTSECRET") {
  tz::s3_options options;
  options.access_key_id = "TESTKEY";
  options.secret_access_key = secret;
  options.endpoint = s3_http_endpoint();
  options.force_http = true;
  options.part_bytes = 5ull << 20;
  options.http.retry.attempts_max = 2;
  return options;
}

const std::vector<std::byte>& data() {
  static const auto bytes = net_test::pattern_bytes(data_bytes, 99);
  return bytes;
}

// Uploads the 64 MiB test object once per run (multipart: 13 parts of 5 MiB, 4 at a time).
void require_object() {
  static bool uploaded = false;
  net_test::require_server("rgw");
  if (uploaded) return;
  auto r = net_test::run(tz::s3_upload(rgw_options(), "s3://tz-test/dir/data64.bin", std::span<const std::byte>(data())));
  REQUIRE_MESSAGE(r.has_value(), r.error().message);
  uploaded = true;
}

tz::result<void> read_into(tz::byte_source& source, std::uint64_t offset, std::vector<std::byte>& out) {
  std::span<std::byte> spans[] = {std::span(out).first(out.size() / 3), std::span(out).subspan(out.size() / 3)};
  return net_test::run(source.read(offset, spans));
}

tz::error open_error(const tz::s3_options& options, const std::string& url) {
  auto source = tz::open_s3_source(options, url);
  REQUIRE(source.has_value());
  auto size = net_test::run((*source)->size());
  REQUIRE_FALSE(size.has_value());
  return size.error();
}

}  // namespace

const tz_test::suite_needs s3_needs_rgw = net_test::suite_needs_server("s3", "rgw");

TEST_SUITE("s3") {

TEST_CASE("a multipart upload reads back equal, whole and in sub-ranges, over HTTP and HTTPS") {
  require_object();
  auto source = tz::open_s3_source(rgw_options(), "s3://tz-test/dir/data64.bin");
  REQUIRE(source.has_value());
  auto size = net_test::run((*source)->size());
  REQUIRE_MESSAGE(size.has_value(), size.error().message);
  CHECK(*size == data_bytes);
  std::vector<std::byte> all(data_bytes);
  auto r = read_into(**source, 0, all);
  REQUIRE_MESSAGE(r.has_value(), r.error().message);
  CHECK(all == data());
  std::vector<std::byte> part(3 << 20);
  REQUIRE(read_into(**source, 7777777, part).has_value());
  CHECK(std::memcmp(part.data(), data().data() + 7777777, part.size()) == 0);

  auto tls = rgw_options();
  tls.endpoint = "https://localhost:" + std::to_string(net_test::port_base() + 482);
  tls.http.ca_file = net_test::work_dir() + "/ca/ca.pem";
  tls.force_http = false;  // force_http would rewrite https:// to http://
  auto secure = tz::open_s3_source(tls, "s3://tz-test/dir/data64.bin");
  REQUIRE(secure.has_value());
  std::vector<std::byte> tail(1 << 20);
  auto t = read_into(**secure, data_bytes - tail.size(), tail);
  REQUIRE_MESSAGE(t.has_value(), t.error().message);
  CHECK(std::memcmp(tail.data(), data().data() + data_bytes - tail.size(), tail.size()) == 0);
}

TEST_CASE("PutObject with special characters in the key round-trips, also virtual-host style") {
  net_test::require_server("rgw");
  auto small = net_test::pattern_bytes(100000, 5);
  const std::string url = "s3://tz-test/dir/a b+c~(1).txt";
  auto put = net_test::run(tz::s3_upload(rgw_options(), url, std::span<const std::byte>(small)));
  REQUIRE_MESSAGE(put.has_value(), put.error().message);
  for (bool vhost : {false, true}) {
    auto options = rgw_options();
    options.virtual_host_style = vhost;
    options.endpoint = "http://localhost:" + std::to_string(net_test::port_base() + 480);
    auto source = tz::open_s3_source(options, url);
    REQUIRE(source.has_value());
    std::vector<std::byte> out(small.size());
    auto r = read_into(**source, 0, out);
    REQUIRE_MESSAGE(r.has_value(), r.error().message);
    CHECK(out == small);
  }
}

TEST_CASE("a wrong secret or key is an auth error naming S3's error code") {
  require_object();
  auto wrong_secret = open_error(rgw_options("WRONG"), "s3://tz-test/dir/data64.bin");
  CHECK(wrong_secret.code == tz::errc::auth);
  CHECK(wrong_secret.message.find("SignatureDoesNotMatch") != std::string::npos);
  CHECK(wrong_secret.message.find("s3://tz-test/dir/data64.bin") != std::string::npos);
  auto options = rgw_options();
  options.access_key_id = "NOSUCHKEY";
  auto wrong_key = open_error(options, "s3://tz-test/dir/data64.bin");
  CHECK(wrong_key.code == tz::errc::auth);
  CHECK(wrong_key.message.find("InvalidAccessKeyId") != std::string::npos);
}

TEST_CASE("a missing object or bucket is a not_found error naming S3's error code") {
  net_test::require_server("rgw");
  auto no_key = open_error(rgw_options(), "s3://tz-test/no/such/key");
  CHECK(no_key.code == tz::errc::not_found);
  CHECK(no_key.message.find("NoSuchKey") != std::string::npos);
  auto no_bucket = open_error(rgw_options(), "s3://tz-no-such-bucket/key");
  CHECK(no_bucket.code == tz::errc::not_found);
  CHECK(no_bucket.message.find("NoSuchBucket") != std::string::npos);
}

TEST_CASE("a multipart upload whose data source fails is aborted and reports the failure") {
  net_test::require_server("rgw");
  tz::s3_part_reader failing = [](std::uint64_t offset, std::span<std::byte> dst) -> tz::task<tz::result<void>> {
    if (offset >= (10ull << 20)) co_return tz::make_error(tz::errc::io, "test source fails at " + std::to_string(offset));
    std::memset(dst.data(), 1, dst.size());
    co_return tz::result<void>{};
  };
  auto r = net_test::run(tz::s3_upload(rgw_options(), "s3://tz-test/aborted.bin", 80ull << 20, failing));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("test source fails") != std::string::npos);
  // No multipart upload of that key is left behind.
  std::string list = "curl -s --aws-sigv4 aws:amz:us-east-1:s3 --user TESTKEY:TESTSECRET "
                     "-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' '" + s3_http_endpoint() + "/tz-test?uploads=' "
                     "| grep -q aborted.bin";
  CHECK(std::system(list.c_str()) != 0);
}

}  // TEST_SUITE("s3")

TEST_SUITE("offline") {

TEST_CASE("S3 endpoints: explicit first, env next, CoreWeave default; http only when forced or from env") {
  ::setenv("HOME", "/nonexistent", 1);
  ::unsetenv("AWS_ENDPOINT_URL_S3");
  ::setenv("AWS_ENDPOINT_URL", "http://env-endpoint:9000", 1);
  tz::s3_options options;
  options.access_key_id = "";
  options.secret_access_key = "";
  auto from_env = tz::resolve_s3(options, false);
  REQUIRE(from_env.has_value());
  CHECK(from_env->endpoint_url == "http://env-endpoint:9000");
  CHECK(from_env->credentials.anonymous());
  CHECK(from_env->region == "us-east-1");
  ::unsetenv("AWS_ENDPOINT_URL");
  CHECK(tz::resolve_s3(options, false)->endpoint_url == "https://accel-object.ord1.coreweave.com");
  CHECK(tz::resolve_s3(options, true)->endpoint_url == "https://object.ord1.coreweave.com");
  options.endpoint = "http://explicit";
  CHECK(tz::resolve_s3(options, false).error().code == tz::errc::invalid_argument);
  options.force_http = true;
  CHECK(tz::resolve_s3(options, false)->endpoint_url == "http://explicit");
  options.endpoint = "cwobject.com";
  options.force_http = false;
  CHECK(tz::resolve_s3(options, false)->virtual_host_style);
}

TEST_CASE("S3 credentials: s3cmd config, then AWS env, then the credentials file profile") {
  auto dir = std::filesystem::temp_directory_path() / ("tz-net-s3cfg-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / ".aws");
  std::ofstream(dir / "s3cfg") << "[default]\naccess_key = CFGKEY\nsecret_key = CFGSECRET\nhost_base = cfg.example\nuse_https = False\n";
  std::ofstream(dir / ".aws/credentials") << "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n"
                                          << "[other]\naws_access_key_id = O\naws_secret_access_key = OS\naws_session_token = T\n";
  ::setenv("HOME", dir.c_str(), 1);
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SHARED_CREDENTIALS_FILE");
  tz::s3_options options;
  options.s3_config_path = (dir / "s3cfg").string();
  auto cfg = tz::resolve_s3(options, false);
  REQUIRE(cfg.has_value());
  CHECK(cfg->credentials.access_key_id == "CFGKEY");
  CHECK(cfg->endpoint_url == "http://cfg.example");
  options.s3_config_path.clear();
  ::setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET", 1);
  ::setenv("AWS_SESSION_TOKEN", "ENVTOKEN", 1);
  auto from_env = tz::resolve_s3(options, false);
  CHECK(from_env->credentials.access_key_id == "ENVKEY");
  CHECK(from_env->credentials.session_token == "ENVTOKEN");
  ::unsetenv("AWS_ACCESS_KEY_ID");
  CHECK(tz::resolve_s3(options, false)->credentials.access_key_id == "D");
  options.profile = "other";
  auto other = tz::resolve_s3(options, false);
  CHECK(other->credentials.access_key_id == "O");
  CHECK(other->credentials.session_token == "T");
  std::filesystem::remove_all(dir);
  CHECK(tz::resolve_s3(options, true).error().code == tz::errc::auth);
}

}  // TEST_SUITE("offline")

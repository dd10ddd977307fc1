// net_cli_test: a model written by `tensorizer synth` and published with `tensorizer copy` to nginx,
// Ceph RGW and Redis loads through the C++ loader API (whole and filtered) byte-equal to the local file.
// Suites "http", "s3", "redis" each need their server (CTest fixtures of tests/net.cmake).
#include "net_test_support.hpp"

#include "tz/backends/file_source.hpp"
#include "tz/backends/http_source.hpp"
#include "tz/engine/loader.hpp"
#include "tz/backends/redis_source.hpp"
#include "tz/backends/s3.hpp"

#include <filesystem>
#include <functional>
#include <map>

namespace {

std::string cli_dir() { return net_test::work_dir() + "/cli-test"; }
std::string model_path() { return cli_dir() + "/model.tensors"; }
std::string port(int offset) { return std::to_string(net_test::port_base() + offset); }

// Runs the tensorizer tool with `arguments`; returns its exit status.
int tensorizer(const std::string& arguments) {
  const std::string command = std::string(TZ_CLI) + " " + arguments + " > " + cli_dir() + "/last.out 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The model, synthesized once per run (about 6 MiB, 92 tensors of mixed dtypes and sizes).
void require_model() {
  std::filesystem::create_directories(cli_dir());
  static bool made = false;
  if (made) return;
  REQUIRE(tensorizer("synth " + model_path() + " --size-mib 6 --seed 7") == 0);
  made = true;
}

tz::s3_options rgw_options() {
  tz::s3_options o;
  o.access_key_id = "TESTKEY";
  o.secret_access_key = "TESTSECRET";
  o.endpoint = "http://127.0.0.1:" + port(480);
  o.force_http = true;
  return o;
}

using tensor_filter = std::function<bool(const tz::format::tensor_entry&)>;

// Loads the tensors `keep` selects through the loader; returns name -> bytes.
std::map<std::string, std::vector<std::byte>> load(std::shared_ptr<tz::byte_source> source, const tensor_filter& keep) {
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, std::move(source));
  REQUIRE_MESSAGE(l.has_value(), l.error().message);
  auto which = l->select(keep);
  REQUIRE_FALSE(which.empty());
  tz::load_options verified;
  verified.verify = true;
  auto loaded = l->load(sched, which, verified);
  REQUIRE_MESSAGE(loaded.has_value(), loaded.error().message);
  std::map<std::string, std::vector<std::byte>> out;
  for (std::size_t i = 0; i < loaded->size(); ++i) {
    auto d = loaded->data(i);
    out[loaded->entry(i).name] = std::vector<std::byte>(d.begin(), d.end());
  }
  CHECK(out.size() == which.size());
  return out;
}

// The remote source loads equal to the local file: all tensors, and only the MLP weights.
void check_loads_equal(const std::function<std::shared_ptr<tz::byte_source>()>& open_remote) {
  auto local = tz::file_source::open(model_path());
  REQUIRE(local.has_value());
  const tensor_filter all = [](const tz::format::tensor_entry&) { return true; };
  const tensor_filter mlp = [](const tz::format::tensor_entry& e) { return e.name.find(".mlp.") != std::string::npos; };
  auto expected = load(*local, all);
  auto whole = load(open_remote(), all);
  CHECK(whole == expected);
  auto filtered = load(open_remote(), mlp);
  CHECK(filtered.size() < expected.size());
  for (const auto& [name, bytes] : filtered) {
    CHECK(name.find(".mlp.") != std::string::npos);
    CHECK(bytes == expected.at(name));
  }
}

template <class Open>
std::shared_ptr<tz::byte_source> shared(Open open) {
  auto source = open();
  REQUIRE_MESSAGE(source.has_value(), source.error().message);
  return std::shared_ptr<tz::byte_source>(std::move(*source));
}

}  // namespace

const tz_test::suite_needs http_needs_nginx = net_test::suite_needs_server("http", "nginx");
const tz_test::suite_needs s3_needs_rgw = net_test::suite_needs_server("s3", "rgw");
const tz_test::suite_needs redis_needs_redis = net_test::suite_needs_server("redis", "redis");

TEST_SUITE("http") {

TEST_CASE("a model served by nginx loads over HTTP and HTTPS equal to the local file, whole and filtered") {
  net_test::require_server("nginx");
  require_model();
  const auto www = net_test::work_dir() + "/nginx/www/cli-model.tensors";
  std::filesystem::copy_file(model_path(), www, std::filesystem::copy_options::overwrite_existing);
  check_loads_equal([] { return shared([] { return tz::open_http_source({}, "http://127.0.0.1:" + port(80) + "/cli-model.tensors"); }); });
  tz::http_options tls;
  tls.ca_file = net_test::work_dir() + "/ca/ca.pem";
  check_loads_equal([&] { return shared([&] { return tz::open_http_source(tls, "https://localhost:" + port(443) + "/cli-model.tensors"); }); });
}

}  // TEST_SUITE

TEST_SUITE("s3") {

TEST_CASE("a model copied to RGW by the CLI loads over S3 equal to the local file, whole and filtered") {
  net_test::require_server("rgw");
  require_model();
  const std::string url = "s3://tz-test/cli/model.tensors";
  const auto copy = "copy --s3-endpoint http://127.0.0.1:" + port(480) + " " + model_path() + " " + url;
  ::setenv("AWS_ACCESS_KEY_ID", "TESTKEY", 1);  // the CLI takes S3 credentials from the environment
  ::setenv("AWS_SECRET_ACCESS_KEY", "TESTSECRET", 1);
  REQUIRE(tensorizer(copy) == 0);
  check_loads_equal([&] { return shared([&] { return tz::open_s3_source(rgw_options(), url); }); });
}

}  // TEST_SUITE

TEST_SUITE("redis") {

TEST_CASE("a model copied to Redis by the CLI loads from its keys equal to the local file, whole and filtered") {
  net_test::require_server("redis");
  require_model();
  const std::string url = "redis://127.0.0.1:" + port(379) + "/cli-model";
  REQUIRE(tensorizer("copy " + model_path() + " " + url) == 0);
  check_loads_equal([&] { return shared([&] { return tz::open_redis_source({}, url); }); });
}

}  // TEST_SUITE

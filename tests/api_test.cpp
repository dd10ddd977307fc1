// The installed C++ API (tensorizer/tensorizer.hpp, libtensorizer.so) against files this test writes:
// open and list, load all / some / one, caller memory, verification with a corrupted file, keys and
// passphrases, progress, tensors as they land, what a device load refuses and why, and error values. Suite "gpu" (needs a
// device; api_test_gpu, and api_emulated_test on the CUDA emulation): device loads read back through
// tests/device_access.h and compared value by value. Suite "http": the node-local cache against nginx.
#include "api_test_files.hpp"
#include "device_access.h"
#include "requirements.hpp"
#include "temp_dir.hpp"

#include "tensorizer/tensorizer.hpp"

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

namespace {

using tensorizer::errc;

// The files of tests/api_test_files.hpp, written once per run into a temporary directory of this
// process, removed at exit.
const std::string& files() {
  static const tz_test::temp_dir dir("tz-api-test");
  static const std::string path = [] {
    const std::string d = dir.path.string();
    tz_test::write_api_test_files(d);
    auto m = tensorizer::model::open(d + "/plain.tensors").value();
    tz_test::corrupt_b(d + "/plain.tensors", d + "/corrupt.tensors", m.tensors().at(*m.find("b")).offset);
    return d;
  }();
  return path;
}

std::string path(const char* name) { return files() + "/" + name; }

// The expected values of tensor `name` (api_test_tensors).
std::vector<float> expected(std::string_view name) {
  for (auto& t : tz_test::api_test_tensors())
    if (t.name == name) return t.values;
  FAIL("no such test tensor");
  return {};
}

std::vector<float> floats(std::span<const std::byte> b) {
  std::vector<float> out(b.size() / sizeof(float));
  std::memcpy(out.data(), b.data(), out.size() * sizeof(float));
  return out;
}

void check_all(const tensorizer::host_tensors& h) {
  REQUIRE(h.size() == 3);
  for (std::size_t i = 0; i < h.size(); ++i) CHECK(floats(h.data(i)) == expected(h.info(i).name));
}

tensorizer::options with_key() {
  tensorizer::options o;
  auto k = tz_test::api_test_key();
  o.decryption = tensorizer::decryption_key::from_key(k).value();
  return o;
}

}  // namespace

TEST_CASE("the version macros match the library") {
  auto v = tensorizer::version();
  CHECK(v.major == TENSORIZER_VERSION_MAJOR);
  CHECK(v.minor == TENSORIZER_VERSION_MINOR);
  CHECK(std::string(v.text) == TENSORIZER_VERSION_STRING);
}

TEST_CASE("open lists every tensor with its dtype, shape, size and offset") {
  for (const char* file : {"plain.tensors", "model.safetensors"}) {
    auto m = tensorizer::model::open(path(file));
    REQUIRE_MESSAGE(m.has_value(), (m.has_value() ? std::string() : m.error().message));
    CHECK(m->is_safetensors() == (std::string(file) == "model.safetensors"));
    CHECK_FALSE(m->encrypted());
    const auto& t = m->tensors();
    REQUIRE(t.size() == 3);
    auto a = t.at(*m->find("a"));
    CHECK(a.dtype == "float32");
    CHECK(a.shape == std::vector<std::uint64_t>{2, 3});
    CHECK(a.size_bytes == 24);
    CHECK(t.at(*m->find("layer.0.weight")).size_bytes == 4000);
    CHECK(a.offset > 0);
    CHECK_FALSE(m->find("nope"));
  }
}

TEST_CASE("load all, some and one tensor into host memory") {
  auto m = tensorizer::model::open(path("plain.tensors"), {.verify = true}).value();
  check_all(m.load().value());
  auto some = m.load({"layer.0.weight", "a"}).value();
  REQUIRE(some.size() == 2);
  CHECK(some.info(0).name == "a");  // file order, whatever the order asked
  CHECK(floats(some.data(*some.find("layer.0.weight"))) == expected("layer.0.weight"));
  CHECK(some.bytes() == 24 + 4000);
  CHECK(some.timings().total_s > 0);
  auto one = m.load_one("b").value();
  REQUIRE(one.size() == 1);
  CHECK(floats(one.data(0)) == expected("b"));
  // safetensors through the same calls
  check_all(tensorizer::model::open(path("model.safetensors")).value().load().value());
  // A sharded checkpoint opens as one model from its directory or its index.
  for (const char* sharded : {"sharded", "sharded/model.safetensors.index.json"}) {
    auto m = tensorizer::model::open(path(sharded));
    REQUIRE_MESSAGE(m.has_value(), m.error().message);
    CHECK(m->is_safetensors());
    check_all(m->load().value());
  }
}

TEST_CASE("unknown and repeated names, missing files and bad URIs are error values") {
  auto m = tensorizer::model::open(path("plain.tensors")).value();
  auto r = m.load({"a", "missing"});
  REQUIRE_FALSE(r);
  CHECK(r.error().code == errc::not_found);
  CHECK(r.error().message.find("'missing'") != std::string::npos);
  CHECK(m.load({"a", "a"}).error().code == errc::invalid_argument);
  auto none = tensorizer::model::open(path("absent.tensors"));
  REQUIRE_FALSE(none);
  CHECK(none.error().code == errc::not_found);
  CHECK_THROWS_AS(none.value(), tensorizer::exception);
  CHECK(tensorizer::model::open("http://").error().code == errc::invalid_argument);
  CHECK(std::string(tensorizer::errc_name(errc::hash_mismatch)) == "hash_mismatch");
}

TEST_CASE("load_into fills caller memory and refuses a buffer of the wrong size") {
  auto m = tensorizer::model::open(path("plain.tensors")).value();
  std::vector<float> a(6), w(1000);
  auto t = m.load_into({{"a", std::as_writable_bytes(std::span(a))}, {"layer.0.weight", std::as_writable_bytes(std::span(w))}});
  REQUIRE_MESSAGE(t.has_value(), (t.has_value() ? std::string() : t.error().message));
  CHECK(a == expected("a"));
  CHECK(w == expected("layer.0.weight"));
  std::vector<float> small(5);
  auto bad = m.load_into({{"a", std::as_writable_bytes(std::span(small))}});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == errc::invalid_argument);
}

TEST_CASE("verify passes a sound file and names the tensor of a corrupted one") {
  CHECK(tensorizer::model::open(path("plain.tensors")).value().verify());
  auto m = tensorizer::model::open(path("corrupt.tensors")).value();
  auto v = m.verify();
  REQUIRE_FALSE(v);
  CHECK(v.error().code == errc::hash_mismatch);
  CHECK(v.error().message.find("tensor 'b'") != std::string::npos);
  CHECK(m.verify({"a", "layer.0.weight"}));  // the sound tensors alone pass
  // A verified load fails the same way; an unverified one delivers the bytes as stored.
  auto verified = tensorizer::model::open(path("corrupt.tensors"), {.verify = true}).value().load();
  REQUIRE_FALSE(verified);
  CHECK(verified.error().code == errc::hash_mismatch);
  CHECK(m.load({"b"}).value().size() == 1);
}

TEST_CASE("encrypted files open with their key or passphrase and fail without or with another") {
  auto m = tensorizer::model::open(path("key.tensors"), with_key()).value();
  CHECK(m.encrypted());
  check_all(m.load().value());
  CHECK(m.verify());
  auto pass = tensorizer::options{};
  pass.decryption = tensorizer::decryption_key::from_passphrase(tz_test::api_test_passphrase).value();
  check_all(tensorizer::model::open(path("passphrase.tensors"), pass).value().load().value());

  auto no_key = tensorizer::model::open(path("key.tensors")).value().load();
  REQUIRE_FALSE(no_key);
  CHECK(no_key.error().code == errc::crypto);
  auto other = tensorizer::options{};
  std::array<std::uint8_t, 32> wrong{};
  other.decryption = tensorizer::decryption_key::from_key(wrong).value();
  auto wrong_key = tensorizer::model::open(path("key.tensors"), other).value().load();
  REQUIRE_FALSE(wrong_key);
  CHECK(wrong_key.error().code == errc::crypto);
  CHECK(tensorizer::model::open(path("plain.tensors"), with_key()).value().load().error().code == errc::crypto);
  CHECK(tensorizer::decryption_key::from_key(std::span(wrong).first(31)).error().code == errc::invalid_argument);
  CHECK(tensorizer::decryption_key::from_passphrase("").error().code == errc::invalid_argument);
}

TEST_CASE("progress reaches the total, for loads and verify; a throwing callback is contained") {
  std::mutex mu;
  std::vector<tensorizer::progress> seen;
  tensorizer::options o;
  o.threads = 2;  // a private scheduler, stopped with the model
  o.on_progress = [&](const tensorizer::progress& p) {
    std::lock_guard lock(mu);
    seen.push_back(p);
  };
  auto m = tensorizer::model::open(path("plain.tensors"), o).value();
  REQUIRE(m.load());
  REQUIRE_FALSE(seen.empty());
  CHECK(seen.back().bytes_done == seen.back().bytes_total);
  CHECK(seen.back().tensors_done == 3);
  seen.clear();
  REQUIRE(m.verify());
  REQUIRE_FALSE(seen.empty());
  CHECK(seen.back().bytes_done == seen.back().bytes_total);
  tensorizer::options throwing;
  throwing.on_progress = [](const tensorizer::progress&) { throw std::runtime_error("callback"); };
  check_all(tensorizer::model::open(path("plain.tensors"), throwing).value().load().value());
}

TEST_CASE("a device load names an unknown or repeated tensor before it looks for a device") {
  auto m = tensorizer::model::open(path("plain.tensors")).value();
  auto missing = m.load_to_device(0, {"a", "missing"});
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == errc::not_found);
  CHECK_MESSAGE(missing.error().message.find("no tensor named 'missing'") != std::string::npos, missing.error().message);
  CHECK_MESSAGE(missing.error().message.find(path("plain.tensors")) != std::string::npos, missing.error().message);
  auto twice = m.load_to_device(0, {"b", "b"});
  REQUIRE_FALSE(twice);
  CHECK(twice.error().code == errc::invalid_argument);
  CHECK_MESSAGE(twice.error().message.find("'b' is named twice") != std::string::npos, twice.error().message);
}

TEST_CASE("a device load onto a device that is not there fails with errc::no_device naming it") {
  const int absent = tz_test_device_count();  // one past the last device: cuda:0 without a GPU
  auto m = tensorizer::model::open(path("plain.tensors")).value();
  auto d = m.load_to_device(absent, {"a"});
  REQUIRE_FALSE(d);
  CHECK(d.error().code == errc::no_device);
  const std::string device = "cuda:" + std::to_string(absent);
  CHECK_MESSAGE(d.error().message.find(device) != std::string::npos, d.error().message);
}

TEST_CASE("invalid remote options are refused at open") {
  tensorizer::options o;
  o.connect_timeout_s = -1;
  CHECK(tensorizer::model::open(path("plain.tensors"), o).error().code == errc::invalid_argument);
  o = {};
  o.connections = 1000;
  CHECK(tensorizer::model::open(path("plain.tensors"), o).error().code == errc::invalid_argument);
}

namespace {
TEST_CASE("tensors as they land: each handed over once, in file order, checked, and kept alive by its owner") {
  struct seen {
    std::size_t index, position;
    std::string name;
    std::vector<float> values;
    std::span<const std::byte> view;
    std::shared_ptr<const void> owner;
  };
  std::vector<seen> got;
  tensorizer::options o = with_key();
  o.verify = true;
  o.on_tensor = [&](const tensorizer::ready_tensor& r) {
    got.push_back({r.index, r.position, r.info->name, floats(r.host), r.host, r.owner});
  };
  auto m = tensorizer::model::open(path("key.tensors"), o).value();
  auto all = m.load();
  REQUIRE_MESSAGE(all, all.error().message);
  REQUIRE(got.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(got[i].position == i);
    CHECK(got[i].name == all->info(i).name);
    CHECK(got[i].index == *m.find(got[i].name));
    CHECK(got[i].values == expected(got[i].name));  // decrypted and verified when handed over
    CHECK(got[i].view.data() == all->data(i).data());
    CHECK(got[i].owner != nullptr);
  }
  // load_into hands over the caller's memory, with no owner.
  got.clear();
  std::vector<std::byte> b(m.tensors().at(*m.find("b")).size_bytes);
  REQUIRE(m.load_into({{"b", b}}));
  REQUIRE(got.size() == 1);
  CHECK(got[0].view.data() == b.data());
  CHECK(got[0].owner == nullptr);
  // A verified load of a corrupted file hands over nothing from the bad tensor on; what it handed over
  // stays intact after the failed load is gone, held by its owner.
  got.clear();
  o = {};
  o.verify = true;
  o.on_tensor = [&](const tensorizer::ready_tensor& r) {
    got.push_back({r.index, r.position, r.info->name, floats(r.host), r.host, r.owner});
  };
  auto bad = tensorizer::model::open(path("corrupt.tensors"), o).value().load();
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == errc::hash_mismatch);
  for (const auto& g : got) {
    CHECK(g.name != "b");
    CHECK(floats(g.view) == expected(g.name));
  }
}


const tz_test::suite_needs gpu_needs_a_device{"gpu", "a CUDA device", [] {
  return tz_test_device_count() > 0 ? std::string() : std::string("the CUDA runtime counts no device");
}};

// Tensor i of `d` read back from the device.
std::vector<std::byte> download(const tensorizer::device_tensors& d, std::size_t i) {
  std::vector<std::byte> host(d.info(i).size_bytes);
  REQUIRE(tz_test_device_read(host.data(), d.data(i), host.size()) == 0);
  return host;
}

// Every tensor of `d` holds, on the device, the values it was written with, at a 256-byte aligned address.
void check_device(const tensorizer::device_tensors& d, const std::vector<std::string>& names) {
  REQUIRE(d.size() == names.size());
  CHECK(d.device() == 0);
  for (std::size_t i = 0; i < d.size(); ++i) {
    CAPTURE(d.info(i).name);
    CHECK(d.info(i).name == names[i]);
    CHECK(reinterpret_cast<std::uintptr_t>(d.data(i)) % 256 == 0);
    CHECK(floats(download(d, i)) == expected(d.info(i).name));
    CHECK(d.find(d.info(i).name) == i);
  }
}

}  // namespace

// Device loads read back (CTest entry api_test_gpu; on the CUDA emulation, api_emulated_test).
TEST_SUITE("gpu") {
  TEST_CASE("a device load puts every tensor's bytes on the device, whole and filtered, in file order") {
    auto m = tensorizer::model::open(path("plain.tensors")).value();
    auto all = m.load_to_device(0);
    REQUIRE_MESSAGE(all, all.error().message);
    check_device(*all, {"a", "b", "layer.0.weight"});
    CHECK(all->timings().total_s > 0);
    auto some = m.load_to_device(0, {"layer.0.weight", "a"});
    REQUIRE_MESSAGE(some, some.error().message);
    check_device(*some, {"a", "layer.0.weight"});
    auto one = m.load_to_device(0, {"b"});
    REQUIRE_MESSAGE(one, one.error().message);
    check_device(*one, {"b"});
  }

  TEST_CASE("a device load hands each tensor over once its copy completed, in file order, on the device") {
    std::vector<std::pair<std::string, std::vector<float>>> got;
    tensorizer::options o = with_key();
    o.verify = true;
    o.on_tensor = [&](const tensorizer::ready_tensor& r) {
      std::vector<std::byte> host(r.info->size_bytes);
      REQUIRE(tz_test_device_read(host.data(), r.device_data, host.size()) == 0);
      CHECK(r.device == 0);
      CHECK(r.owner != nullptr);
      got.emplace_back(r.info->name, floats(host));
    };
    auto m = tensorizer::model::open(path("key.tensors"), o).value();
    auto d = m.load_to_device(0);
    REQUIRE_MESSAGE(d, d.error().message);
    REQUIRE(got.size() == d->size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      CHECK(got[i].first == d->info(i).name);
      CHECK(got[i].second == expected(got[i].first));
    }
  }

  TEST_CASE("encrypted, verified, safetensors and sharded models load to the device byte for byte") {
    for (const std::string name : {"key.tensors", "model.safetensors", "sharded"}) {
      CAPTURE(name);
      auto o = name == "key.tensors" ? with_key() : tensorizer::options{};
      o.verify = true;
      auto m = tensorizer::model::open(path(name.c_str()), o);
      REQUIRE_MESSAGE(m, m.error().message);
      auto d = m->load_to_device(0);
      REQUIRE_MESSAGE(d, d.error().message);
      std::vector<std::string> names;
      for (std::size_t i = 0; i < d->size(); ++i) names.push_back(d->info(i).name);
      CHECK(names.size() == 3);
      check_device(*d, names);
    }
  }

  TEST_CASE("every rank's share of a partition, loaded into device memory the caller owns, rebuilds the model") {
    for (const std::string name : {"plain.tensors", "key.tensors"}) {
      CAPTURE(name);
      auto m = tensorizer::model::open(path(name.c_str()), name == "key.tensors" ? with_key() : tensorizer::options{}).value();
      auto whole = m.load().value();
      for (unsigned world : {1u, 2u, 3u}) {
        CAPTURE(world);
        auto plan = m.plan_partition(world).value();
        const auto total = plan.begin[world];
        auto* flat = static_cast<std::byte*>(tz_test_device_alloc(total));
        REQUIRE(flat != nullptr);
        for (unsigned r = 0; r < world; ++r) {
          std::vector<tensorizer::device_part_destination> mine;
          for (const auto& p : plan.parts[r]) mine.push_back({p, flat + plan.flat_offset[p.index] + p.begin_bytes});
          auto got = m.load_parts_to_device(0, mine);
          REQUIRE_MESSAGE(got, got.error().message);
          CHECK(got->read_bytes >= plan.begin[r + 1] - plan.begin[r]);
          CHECK(got->pinned_bytes > 0);
        }
        std::vector<std::byte> host(total);
        REQUIRE(tz_test_device_read(host.data(), flat, total) == 0);
        tz_test_device_free(flat);
        std::uint64_t at = 0;
        for (std::size_t i = 0; i < whole.size(); ++i) {
          const auto want = whole.data(i);
          CHECK(std::equal(want.begin(), want.end(), host.begin() + static_cast<std::ptrdiff_t>(at)));
          at += want.size();
        }
        CHECK(at == total);
      }
    }
  }

  TEST_CASE("a device load of a corrupted tensor fails verification naming it") {
    tensorizer::options o;
    o.verify = true;
    auto m = tensorizer::model::open(path("corrupt.tensors"), o).value();
    auto d = m.load_to_device(0);
    REQUIRE_FALSE(d);
    CHECK(d.error().code == errc::hash_mismatch);
    CHECK_MESSAGE(d.error().message.find("'b'") != std::string::npos, d.error().message);
  }
}

// Against nginx (CTest entry api_test_http, tests/net_cli.cmake, which starts it): the cache options
// reach the node-local cache, and model::cache_status() tells what it did.
namespace {

const tz_test::suite_needs http_needs_nginx{"http", "nginx", [] {
  const char* top = std::getenv("TZ_NET_WORKDIR");
  const char* base = std::getenv("TZ_NET_PORT_BASE");
  const char* scripts = std::getenv("TZ_NET_SCRIPTS");
  if (!top || !base || !scripts) return std::string("run through CTest (api_test_http), which sets TZ_NET_* and starts it");
  const std::string start = std::string(scripts) + "/nginx.sh start '" + top + "' " + base;
  const int status = std::system(start.c_str());
  return WIFEXITED(status) && WEXITSTATUS(status) == 77 ? "not installed (" + start + ": exit 77)" : std::string();
}};

}  // namespace

TEST_SUITE("http") {
  TEST_CASE("a remote model through the node-local cache: filled by the first load, read from the copy next") {
    const char* top = std::getenv("TZ_NET_WORKDIR");
    const char* base = std::getenv("TZ_NET_PORT_BASE");
    REQUIRE_MESSAGE((top && base), "run through CTest (api_test_http): it starts nginx");
    const std::string www = std::string(top) + "/nginx/www/api-test";
    std::filesystem::create_directories(www);
    std::filesystem::copy_file(path("plain.tensors"), www + "/plain.tensors",
                               std::filesystem::copy_options::overwrite_existing);
    const std::string url = "http://127.0.0.1:" + std::to_string(std::stoi(base) + 80) + "/api-test/plain.tensors";
    const tensorizer::options o{.cache_dir = files() + "/cache"};
    {
      auto m = tensorizer::model::open(url, o).value();
      check_all(m.load().value());
      CHECK_MESSAGE(m.cache_status().rfind("filled", 0) == 0, m.cache_status());
    }
    auto m = tensorizer::model::open(url, o).value();
    check_all(m.load().value());
    CHECK_MESSAGE(m.cache_status().rfind("hit: " + files() + "/cache/", 0) == 0, m.cache_status());
    CHECK(tensorizer::model::open(path("plain.tensors")).value().cache_status().empty());
  }
}

// The node-local cache (tz/cache.hpp) over in-memory sources with a version: fill and publish,
// hits that read nothing remotely, a new version fetched again, partial loads not kept, gaps filled,
// LRU eviction, a stalled filler, and several processes loading the same object at once.
#include "result_printer.hpp"
#include "test_bytes.hpp"
#include "tz/backends/cache.hpp"
#include "tz/backends/memory_source.hpp"
#include "tz/engine/scheduler.hpp"
#include "tz/sources/sources.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

using tz::test::pattern;

struct temp_dir {
  std::string path;
  temp_dir() {
    std::string t = fs::temp_directory_path().string() + "/tz-cache-test-XXXXXX";
    REQUIRE(::mkdtemp(t.data()));
    path = t;
  }
  ~temp_dir() { fs::remove_all(path); }
};

std::shared_ptr<tz::memory_source> remote(std::vector<std::byte> data, std::string version) {
  auto m = std::make_shared<tz::memory_source>(std::move(data), "https://example/model.tensors");
  m->set_version(std::move(version));
  return m;
}

std::shared_ptr<tz::byte_source> cached(std::shared_ptr<tz::byte_source> r, const tz::cache_options& o) {
  auto c = tz::open_cached(std::move(r), "https://example/model.tensors\n", o);
  REQUIRE(c);
  return *c;
}

// Reads [begin, end) in `step` sized reads, all in flight at once, as a load does.
std::vector<std::byte> read_range(tz::scheduler& sched, tz::byte_source& s, std::size_t begin, std::size_t end,
                                  std::size_t step) {
  std::vector<std::byte> out(end - begin);
  REQUIRE(tz::run(sched, s.size()));
  std::vector<std::thread> readers;
  std::atomic<int> failures{0};
  for (std::size_t at = begin; at < end; at += step) {
    readers.emplace_back([&, at] {
      auto n = std::min(step, end - at);
      if (!tz::read_blocking(sched, s, at, std::span(out).subspan(at - begin, n))) ++failures;
    });
  }
  for (auto& t : readers) t.join();
  REQUIRE(failures == 0);
  return out;
}

std::vector<fs::path> objects(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir + "/tensorizer-cache-v1/objects")) out.push_back(e.path());
  return out;
}

}  // namespace

TEST_CASE("a full read fills the cache; the next open reads the copy and nothing remotely") {
  tz::scheduler sched(2);
  temp_dir dir;
  const auto data = pattern(3'000'000, 1);
  auto r1 = remote(data, "\"etag-1\"");
  {
    auto c = cached(r1, {.dir = dir.path});
    CHECK(read_range(sched, *c, 0, data.size(), 256 * 1024) == data);
    CHECK(tz::cache_status(*c).starts_with("filled"));
  }
  REQUIRE(objects(dir.path).size() == 1);
  CHECK(fs::file_size(objects(dir.path)[0]) == data.size());

  auto r2 = remote(data, "\"etag-1\"");
  auto c2 = cached(r2, {.dir = dir.path});
  CHECK(read_range(sched, *c2, 0, data.size(), 1 << 20) == data);
  CHECK(tz::cache_status(*c2).starts_with("hit: "));
  CHECK(r2->reads() == 0);
  CHECK(tz::cache_status(*r2).empty());
}

TEST_CASE("a new version is fetched again and replaces the old copy") {
  tz::scheduler sched(2);
  temp_dir dir;
  {
    auto c = cached(remote(pattern(100'000, 1), "\"v1\""), {.dir = dir.path});
    read_range(sched, *c, 0, 100'000, 10'000);
  }
  const auto v2 = pattern(100'000, 2);
  auto r = remote(v2, "\"v2\"");
  {
    auto c = cached(r, {.dir = dir.path});
    CHECK(read_range(sched, *c, 0, v2.size(), 10'000) == v2);
    CHECK(tz::cache_status(*c).starts_with("filled"));
  }
  CHECK(r->reads() > 0);
  REQUIRE(objects(dir.path).size() == 1);
  auto c = cached(remote(v2, "\"v2\""), {.dir = dir.path});
  CHECK(read_range(sched, *c, 0, v2.size(), 10'000) == v2);
  CHECK(tz::cache_status(*c).starts_with("hit: "));
}

TEST_CASE("a load that reads part of the object keeps nothing and releases the object") {
  tz::scheduler sched(2);
  temp_dir dir;
  const auto data = pattern(64 << 20, 3);
  {
    auto c = cached(remote(data, "\"e\""), {.dir = dir.path});
    read_range(sched, *c, 0, 8 << 20, 1 << 20);
    CHECK(tz::cache_status(*c).starts_with("filling"));
  }
  CHECK(objects(dir.path).empty());
  auto c = cached(remote(data, "\"e\""), {.dir = dir.path});
  read_range(sched, *c, 0, data.size(), 4 << 20);
  CHECK(tz::cache_status(*c).starts_with("filled"));
}

TEST_CASE("bytes no load reads are fetched by the cache before it publishes") {
  tz::scheduler sched(2);
  temp_dir dir;
  const auto data = pattern(10'000'000, 4);
  {
    auto c = cached(remote(data, "\"e\""), {.dir = dir.path});
    read_range(sched, *c, 4096, 5'000'000, 1 << 20);
    read_range(sched, *c, 5'000'100, data.size() - 8, 1 << 20);
    CHECK(tz::cache_status(*c).starts_with("filled"));
  }
  REQUIRE(objects(dir.path).size() == 1);
  std::ifstream in(objects(dir.path)[0], std::ios::binary);
  std::vector<std::byte> back(data.size());
  in.read(reinterpret_cast<char*>(back.data()), static_cast<std::streamsize>(back.size()));
  CHECK(back == data);
}

TEST_CASE("sources without a version and objects over the bound are read directly") {
  tz::scheduler sched(2);
  temp_dir dir;
  const auto data = pattern(50'000, 5);
  auto c = cached(remote(data, ""), {.dir = dir.path});
  CHECK(read_range(sched, *c, 0, data.size(), 10'000) == data);
  CHECK(tz::cache_status(*c).find("no ETag") != std::string::npos);
  auto big = cached(remote(data, "\"e\""), {.dir = dir.path, .max_bytes = 10'000});
  CHECK(read_range(sched, *big, 0, data.size(), 10'000) == data);
  CHECK(tz::cache_status(*big).find("exceed the cache bound") != std::string::npos);
  CHECK(objects(dir.path).empty());
}

TEST_CASE("past the bound, the least recently used copy is evicted") {
  tz::scheduler sched(2);
  temp_dir dir;
  const tz::cache_options o{.dir = dir.path, .max_bytes = 250'000};
  auto load = [&](std::string key, unsigned seed) {
    auto c = tz::open_cached(remote(pattern(100'000, seed), "\"e\""), key, o);
    REQUIRE(c);
    read_range(sched, **c, 0, 100'000, 50'000);
    return tz::cache_status(**c);
  };
  CHECK(load("a", 1).starts_with("filled"));
  std::this_thread::sleep_for(20ms);
  CHECK(load("b", 2).starts_with("filled"));
  std::this_thread::sleep_for(20ms);
  CHECK(load("a", 1).starts_with("hit"));  // a is now the more recently used
  std::this_thread::sleep_for(20ms);
  CHECK(load("c", 3).starts_with("filled"));
  CHECK(objects(dir.path).size() == 2);
  CHECK(load("a", 1).starts_with("hit"));
  CHECK(load("b", 2).starts_with("filled"));  // b was evicted
}

TEST_CASE("a filler that makes no progress is waited for only wait_stall, then the load goes on") {
  tz::scheduler sched(2);
  temp_dir dir;
  const auto data = pattern(16 << 20, 6);  // more than the gap the cache fetches by itself
  auto probe = cached(remote(data, "\"e\""), {.dir = dir.path, .max_bytes = 1 << 30});
  read_range(sched, *probe, 0, 10, 10);  // learns the lock path through its status
  const auto part = tz::cache_status(*probe).substr(tz::cache_status(*probe).find(": ") + 2);
  probe.reset();
  const auto key_hex = fs::path(part).filename().string().substr(0, 32);
  const auto lock_path = dir.path + "/tensorizer-cache-v1/locks/" + key_hex + ".lock";
  int held = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
  REQUIRE(::flock(held, LOCK_EX) == 0);
  auto c = cached(remote(data, "\"e\""), {.dir = dir.path, .wait_stall = 300ms});
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(read_range(sched, *c, 0, data.size(), 1 << 20) == data);
  CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);
  CHECK_MESSAGE(tz::cache_status(*c).find("made no progress") != std::string::npos, tz::cache_status(*c));
  ::close(held);
}

TEST_CASE("processes loading the same object at once: one downloads, the others read its copy") {
  temp_dir dir;
  const auto data = pattern(32 << 20, 7);
  constexpr int processes = 4;
  std::vector<pid_t> children;
  for (int i = 0; i < processes; ++i) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      tz::scheduler sched(2);
      auto r = remote(data, "\"shared\"");
      auto c = tz::open_cached(r, "k", {.dir = dir.path});
      if (!c) std::_Exit(10);
      auto got = read_range(sched, **c, 0, data.size(), 2 << 20);
      const auto status = tz::cache_status(**c);
      c->reset();  // waits until the copy is published
      // 0: read the copy (nothing remote), 1: downloaded and published it, else a failure.
      std::_Exit(got != data ? 11 : status.starts_with("hit") && r->reads() == 0 ? 0 : status.starts_with("filled") ? 1 : 12);
    }
    children.push_back(pid);
  }
  int downloaded = 0, hits = 0;
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    const int code = WEXITSTATUS(status);
    CHECK(code <= 1);
    if (code == 1) ++downloaded;
    if (code == 0) ++hits;
  }
  CHECK(downloaded == 1);
  CHECK(hits == processes - 1);
}

TEST_CASE("sizes and the environment") {
  CHECK(*tz::parse_byte_size("1073741824") == 1073741824ull);
  CHECK(*tz::parse_byte_size("512M") == 512ull << 20);
  CHECK(*tz::parse_byte_size("1.5g") == 3ull << 29);
  CHECK(*tz::parse_byte_size("2T") == 2ull << 40);
  for (const char* bad : {"", "M", "-1", "12X", "1e30", "5 G"}) CHECK(!tz::parse_byte_size(bad));
  ::setenv("TENSORIZER_CACHE_DIR", "/var/cache/tz", 1);
  ::setenv("TENSORIZER_CACHE_MAX_SIZE", "20G", 1);
  auto o = tz::cache_options_from_env();
  REQUIRE(o);
  CHECK(o->dir == "/var/cache/tz");
  CHECK(o->max_bytes == 20ull << 30);
  ::setenv("TENSORIZER_CACHE_MAX_SIZE", "lots", 1);
  CHECK(!tz::cache_options_from_env());
  ::unsetenv("TENSORIZER_CACHE_DIR");
  ::unsetenv("TENSORIZER_CACHE_MAX_SIZE");
}

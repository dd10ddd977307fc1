// Scheduler, lease ring (back-pressure, cancellation, no leaked leases or frames) and byte sources.
#include "temp_dir.hpp"
#include "test_bytes.hpp"
#include "tz/backends/file_source.hpp"
#include "tz/engine/host_memory.hpp"
#include "tz/engine/lease_ring.hpp"
#include "tz/backends/memory_source.hpp"
#include "tz/engine/scheduler.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <set>
#include <span>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <thread>

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using namespace std::chrono_literals;

namespace {

// Counts live instances: a probe held by a coroutine frame proves the frame was destroyed.
struct probe {
  static inline std::atomic<int> live{0};
  probe() { ++live; }
  probe(const probe&) { ++live; }
  ~probe() { --live; }
};

using tz::test::pattern;

tz::task<void> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(tz::use_task);
}

}  // namespace

TEST_CASE("scheduler runs tasks on its workers and spreads them round-robin") {
  tz::scheduler sched(2);
  CHECK(sched.thread_count() == 2);
  CHECK_FALSE(sched.on_worker());
  auto on_worker = tz::run(sched, [&]() -> tz::task<bool> { co_return sched.on_worker(); }());
  CHECK(on_worker);
  std::thread::id a = tz::spawn(sched.next_executor(), []() -> tz::task<std::thread::id> {
                        co_return std::this_thread::get_id();
                      }()).get();
  std::thread::id b = tz::spawn(sched.next_executor(), []() -> tz::task<std::thread::id> {
                        co_return std::this_thread::get_id();
                      }()).get();
  CHECK(a != b);
}

TEST_CASE("the shared scheduler outlives its holders: later loads reuse its workers and rings") {
  std::weak_ptr<tz::scheduler> seen;
  std::thread::id worker;
  {
    auto s = tz::shared_scheduler();
    seen = s;
    worker = tz::spawn(s->worker_executor(0), []() -> tz::task<std::thread::id> {
               co_return std::this_thread::get_id();
             }()).get();
  }
  // Every holder is gone; the scheduler (and its worker threads) must still be there.
  REQUIRE_FALSE(seen.expired());
  auto again = tz::shared_scheduler();
  CHECK(again == seen.lock());
  CHECK(tz::spawn(again->worker_executor(0), []() -> tz::task<std::thread::id> {
          co_return std::this_thread::get_id();
        }()).get() == worker);
}

TEST_CASE("an exception escaping a task reaches the waiter") {
  tz::scheduler sched(1);
  CHECK_THROWS_AS(tz::run(sched, []() -> tz::task<int> {
                    throw std::runtime_error("boom");
                    co_return 1;
                  }()),
                  std::runtime_error);
}

TEST_CASE("destroying a scheduler with suspended tasks destroys their frames") {
  {
    tz::scheduler sched(2);
    std::atomic<int> started{0};
    for (int i = 0; i < 8; ++i) {
      asio::co_spawn(sched.next_executor(), [&started]() -> tz::task<void> {
        probe p;
        ++started;
        co_await sleep_for(1h);
      }, asio::detached);
    }
    while (started < 8) std::this_thread::yield();
    CHECK(probe::live == 8);
  }
  CHECK(probe::live == 0);
}

TEST_CASE("lease ring hands out each slot once and takes it back on destruction") {
  tz::lease_ring ring(3, 1000);
  CHECK(ring.slot_bytes() == 4096);
  CHECK(ring.available() == 3);
  {
    auto a = ring.try_acquire();
    auto b = ring.try_acquire();
    auto c = ring.try_acquire();
    REQUIRE((a && b && c));
    CHECK_FALSE(ring.try_acquire());
    CHECK(a.bytes().data() != b.bytes().data());
    CHECK(reinterpret_cast<std::uintptr_t>(c.bytes().data()) % 4096 == 0);
    auto moved = std::move(a);
    CHECK_FALSE(a);
    CHECK(ring.available() == 0);
    moved.reset();
    CHECK(ring.available() == 1);
  }
  CHECK(ring.available() == 3);
}

namespace {
struct ring_counters {
  std::atomic<int> holding{0}, max_holding{0}, done{0};
};

// A coroutine taking its state as parameters (a capturing lambda would dangle once spawned).
tz::task<void> hold_a_lease(tz::lease_ring& ring, ring_counters& c, const void* expected_context) {
  probe p;
  auto l = co_await ring.acquire();
  REQUIRE(l.has_value());
  // Resumed on the io_context it was spawned on.
  auto current = co_await asio::this_coro::executor;
  CHECK(&asio::query(current, asio::execution::context) == expected_context);
  int now = ++c.holding;
  int prev = c.max_holding.load();
  while (now > prev && !c.max_holding.compare_exchange_weak(prev, now)) {}
  co_await sleep_for(1ms);
  --c.holding;
  ++c.done;
}
}  // namespace

TEST_CASE("acquire suspends while every slot is out and resumes on the waiter's executor") {
  tz::scheduler sched(2);
  tz::lease_ring ring(2, 4096);
  ring_counters c;
  std::vector<std::future<void>> futures;
  for (int i = 0; i < 16; ++i) {
    auto ex = sched.next_executor();
    futures.push_back(tz::spawn(ex, hold_a_lease(ring, c, &asio::query(ex, asio::execution::context))));
  }
  for (auto& f : futures) f.get();
  CHECK(c.done == 16);
  CHECK(c.max_holding <= 2);
  CHECK(c.max_holding >= 1);
  CHECK(ring.available() == 2);
  CHECK(probe::live == 0);
}

TEST_CASE("a cancelled acquire returns errc::cancelled and leaves the ring whole") {
  tz::scheduler sched(1);
  tz::lease_ring ring(1, 4096);
  auto held = ring.try_acquire();
  REQUIRE(held);
  auto outcome = tz::run(sched, [&]() -> tz::task<int> {
    probe p;
    // The timer wins the race; the acquire is cancelled through its cancellation slot.
    auto r = co_await (ring.acquire() || sleep_for(20ms));
    if (r.index() == 1) co_return 1;
    co_return 0;
  }());
  CHECK(outcome == 1);
  CHECK(ring.available() == 0);
  held.reset();
  CHECK(ring.available() == 1);
  auto again = tz::run(sched, [&]() -> tz::task<bool> {
    auto l = co_await ring.acquire();
    co_return l.has_value();
  }());
  CHECK(again);
  CHECK(ring.available() == 1);
  CHECK(probe::live == 0);
}

namespace {
// An allocator that readies slots (as the pinned one pins them): gated so the test decides when
// slots 1.. become ready, failing on the slots it is told to.
struct gated_allocator final : tz::buffer_allocator {
  tz::page_allocator pages;
  std::mutex m;
  std::condition_variable cv;
  std::size_t allowed = 1;  // slots readied so far may not exceed this
  bool timed = false;       // the gate opens by itself after 100 ms (a ring going away)
  std::vector<std::byte*> readied;
  std::set<std::size_t> fail;  // ready_slot() call numbers that throw
  std::size_t calls = 0;
  std::byte* allocate(std::size_t n) override { return pages.allocate(n); }
  void deallocate(std::byte* p, std::size_t n) noexcept override { pages.deallocate(p, n); }
  bool readies_slots() const noexcept override { return true; }
  void ready_slot(std::span<std::byte> slot) override {
    std::unique_lock lock(m);
    if (timed) cv.wait_for(lock, 100ms, [&] { return readied.size() < allowed; });
    else cv.wait(lock, [&] { return readied.size() < allowed; });
    const std::size_t call = calls++;
    readied.push_back(slot.data());
    if (fail.count(call)) throw tz::exception(tz::error{tz::errc::io, "ready_slot " + std::to_string(call) + " failed"});
  }
  void allow(std::size_t n) {
    {
      std::lock_guard lock(m);
      allowed = n;
    }
    cv.notify_all();
  }
};
}  // namespace

TEST_CASE("a ring whose allocator readies slots hands out slot 0 at once and each other one once ready") {
  auto alloc = std::make_shared<gated_allocator>();
  tz::scheduler sched(1);
  {
    tz::lease_ring ring(3, 4096, alloc);
    CHECK(ring.available() == 1);
    CHECK(ring.leased() == 0);  // slots still being readied are not out
    auto first = ring.try_acquire();
    REQUIRE(first);
    CHECK(first.slot() == 0);
    CHECK(ring.leased() == 1);
    CHECK_FALSE(ring.try_acquire());
    // A waiter gets slot 1 when it is readied, not before.
    // Named: the coroutine's frame refers to the closure, which must outlive it.
    auto take_one = [&]() -> tz::task<std::size_t> {
      auto l = co_await ring.acquire();
      co_return l ? l->slot() : 99;
    };
    auto waiting = tz::spawn(sched.next_executor(), take_one());
    CHECK(waiting.wait_for(50ms) == std::future_status::timeout);
    alloc->allow(2);
    CHECK(waiting.get() == 1);  // its lease went back when the coroutine ended
    CHECK(ring.leased() == 1);
    alloc->allow(3);
    while (ring.available() < 2) std::this_thread::sleep_for(1ms);
    first.reset();
    CHECK(ring.available() == 3);
    CHECK(ring.leased() == 0);
  }
  CHECK(alloc->readied.size() == 3);
}

TEST_CASE("a ring going away while readying returns the rest unreadied; a failed slot 0 fails the ring") {
  auto alloc = std::make_shared<gated_allocator>();
  alloc->timed = true;
  { tz::lease_ring ring(4, 4096, alloc); }  // slot 1 waits 100 ms at the gate, the ring is gone by then
  CHECK(alloc->readied.size() < 4);        // slot 3 at least was returned unreadied

  auto failing = std::make_shared<gated_allocator>();
  failing->fail = {0};
  CHECK_THROWS_WITH_AS(tz::lease_ring(2, 4096, failing), "ready_slot 0 failed", tz::exception);

  // A later slot that fails to ready is handed out as it is: the ring stays whole.
  auto later = std::make_shared<gated_allocator>();
  later->fail = {1};
  later->allow(3);
  tz::lease_ring ring(3, 4096, later);
  while (ring.available() < 3) std::this_thread::sleep_for(1ms);
  CHECK(later->readied.size() == 3);
}

TEST_CASE("memory source resubmits short reads and retries EINTR and EAGAIN") {
  auto data = pattern(100000);
  tz::memory_source src(data);
  src.set_attempt_max_bytes(7000);
  src.inject({12345, tz::injected_fault::kind::short_read, 1});
  src.inject({30000, tz::injected_fault::kind::interrupted, 3});
  src.inject({50000, tz::injected_fault::kind::again, 5});
  std::vector<std::byte> a(40000), b(60000 - 1);
  std::vector<std::span<std::byte>> spans{a, b};
  auto r = tz::sync_wait(src.read(1, spans));
  REQUIRE(r.has_value());
  CHECK(std::equal(a.begin(), a.end(), data.begin() + 1));
  CHECK(std::equal(b.begin(), b.end(), data.begin() + 40001));
  CHECK(src.attempts() > 100000 / 7000 + 8);
}

TEST_CASE("memory source surfaces a hard error and EOF with the source name and offset") {
  tz::memory_source src(pattern(10000), "fake-a");
  src.inject({8000, tz::injected_fault::kind::hard, 0});
  src.set_attempt_max_bytes(4096);
  std::vector<std::byte> buf(9000);
  std::vector<std::span<std::byte>> spans{buf};
  auto r = tz::sync_wait(src.read(0, spans));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == tz::errc::io);
  CHECK(r.error().message.find("fake-a") != std::string::npos);
  CHECK(r.error().message.find("offset 4096") != std::string::npos);

  tz::memory_source eof(pattern(100), "fake-b");
  auto r2 = tz::sync_wait(eof.read(50, spans));
  REQUIRE_FALSE(r2.has_value());
  CHECK(r2.error().message.find("end of data at offset 100") != std::string::npos);
}

TEST_CASE("memory source gives up after too many EAGAIN in a row") {
  tz::memory_source src(pattern(1000));
  src.inject({10, tz::injected_fault::kind::again, 1000});
  std::vector<std::byte> buf(100);
  std::vector<std::span<std::byte>> spans{buf};
  auto r = tz::sync_wait(src.read(0, spans));
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().message.find("offset 0") != std::string::npos);
}

namespace {
std::string write_temp_file(const tz_test::temp_dir& dir, const std::vector<std::byte>& data) {
  std::string path = dir.file("data.bin");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data.data()), data.size());
  return path;
}

tz::task<bool> read_and_compare(tz::byte_source& src, const std::vector<std::byte>& data, int i) {
  // Page-aligned destination with odd edges: exercises the direct middle and buffered edges.
  std::uint64_t off = i * 1000003ull % (4 << 20) + 17;
  tz::host_buffer hb(3 << 20);
  auto first = hb.bytes().subspan(off % 4096, 1 << 20);
  std::vector<std::byte> second(5000);
  std::vector<std::span<std::byte>> spans{first, second};
  auto r = co_await src.read(off, spans);
  if (!r) co_return false;
  co_return std::equal(first.begin(), first.end(), data.begin() + off) &&
         std::equal(second.begin(), second.end(), data.begin() + off + first.size());
}
}  // namespace

TEST_CASE("file source reads scattered ranges concurrently from every worker, buffered and O_DIRECT") {
  auto data = pattern(8 << 20, 7);
  const tz_test::temp_dir dir("tz-engine-test");
  std::string path = write_temp_file(dir, data);
  for (bool direct : {false, true}) {
    for (bool punt : {false, true}) {
      CAPTURE(direct);
      CAPTURE(punt);
      auto src = tz::file_source::open(path, {direct, punt});
      REQUIRE(src.has_value());
      CHECK(tz::sync_wait((*src)->size()).value() == data.size());
      tz::scheduler sched(2);
      std::vector<std::future<bool>> futures;
      for (int i = 0; i < 8; ++i) futures.push_back(tz::spawn(sched.next_executor(), read_and_compare(**src, data, i)));
      for (auto& f : futures) CHECK(f.get());
      std::vector<std::byte> tail(10);
      std::vector<std::span<std::byte>> spans{tail};
      auto eof = tz::sync_wait((*src)->read(data.size() - 5, spans));
      REQUIRE_FALSE(eof.has_value());
      CHECK(eof.error().message.find(path) != std::string::npos);
    }
  }
}

TEST_CASE("opening a missing file fails with not_found naming the path") {
  auto r = tz::file_source::open("/nonexistent/x.tensors");
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == tz::errc::not_found);
  CHECK(r.error().message.find("/nonexistent/x.tensors") != std::string::npos);
}

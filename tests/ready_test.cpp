// Tensors as they land (load_common_options::on_tensor_ready), host loads: each tensor handed over
// once, in file order by default, with its final bytes, long before the load ends; verified and
// encrypted tensors only after their checks; nothing after a failure, and what was handed over
// stays as it was. (The device sink's handovers: cuda_emulation_ready_test.cpp.)
#include "tz/backends/memory_source.hpp"
#include "tz/crypto/sodium.hpp"
#include "tz/format/encryption.hpp"
#include "tz/format/writer.hpp"
#include "tz/engine/load_trace.hpp"
#include "tz/engine/loader.hpp"

#include "float_model.hpp"
#include "gated_source.hpp"
#include "temp_dir.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <vector>

namespace {

std::vector<std::byte> model_bytes(std::size_t count, std::size_t base_bytes) {
  return tz_test::write_floats(count, base_bytes);
}

// What the callback saw: per handover its position, a copy of its bytes then, the owner, the reads started.
struct seen_tensor {
  std::size_t position;
  std::vector<std::byte> bytes;
  std::span<const std::byte> view;
  std::shared_ptr<const void> owner;
  std::size_t reads_started;
  double seconds;
};

struct recorder {
  std::mutex mutex;
  std::vector<seen_tensor> seen;
  tz_test::gated_source* source = nullptr;
  void attach(tz::load_common_options& o) {
    o.on_tensor_ready = [this](const tz::tensor_ready& r) {
      std::lock_guard lock(mutex);  // the callback is never concurrent with itself: this only checks it
      seen.push_back({r.position, {r.host.begin(), r.host.end()}, r.host, r.owner,
                      source ? source->started.load() : 0, r.seconds});
      if (source) source->open();  // the first tensor is here: the second half may be read
    };
  }
};

}  // namespace

TEST_CASE("every tensor is handed over once, in file order, with its final bytes, before the load ends") {
  auto bytes = model_bytes(24, 200000);
  auto src = std::make_shared<tz_test::gated_source>(bytes, bytes.size() / 2);
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, src).value();
  for (bool verify : {false, true}) {
    CAPTURE(verify);
    recorder rec;
    rec.source = src.get();
    tz::load_options o;
    o.verify = verify;
    o.readers = 2;
    o.range_bytes = 128 << 10;  // tensors of ~200 KB: split over ranges, many ranges in all
    o.trace = std::make_shared<tz::load_trace>();
    rec.attach(o);
    src->started = 0;
    src->close();
    auto loaded = l.load(sched, {}, o);
    REQUIRE(loaded.has_value());
    const std::size_t reads = src->started.load();
    REQUIRE(rec.seen.size() == 24);
    for (std::size_t i = 0; i < 24; ++i) {
      CAPTURE(i);
      CHECK(rec.seen[i].position == i);
      CHECK(tz_test::floats_match(rec.seen[i].bytes, i, 200000));  // final when handed over
      CHECK(rec.seen[i].view.data() == loaded->data(i).data());     // a view of the load's memory
      CHECK(rec.seen[i].owner != nullptr);
      if (i > 0) CHECK(rec.seen[i].seconds >= rec.seen[i - 1].seconds);
    }
    // The first tensor came while most reads were still to start: it did not wait for the load.
    // The first tensor came while the second half of the file was still to be read.
    CHECK_FALSE(src->held_too_long.load());
    CHECK(rec.seen.front().reads_started < reads);
    const tz_test::temp_dir dir("tz-ready-test");
    REQUIRE(o.trace->write(dir.file("trace.json")).has_value());
    const auto raw = tz_test::read_file(dir.file("trace.json"));
    const std::string json(reinterpret_cast<const char*>(raw.data()), raw.size());
    CHECK(json.find("\"ready t0\"") != std::string::npos);
    CHECK(json.find("\"ready t23\"") != std::string::npos);
  }
}

TEST_CASE("out of file order, each tensor is handed over once as it completes") {
  auto bytes = model_bytes(16, 300000);
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
  recorder rec;
  tz::load_options o;
  o.range_bytes = 256 << 10;
  o.ready_in_file_order = false;
  rec.attach(o);
  auto loaded = l.load(sched, {}, o);
  REQUIRE(loaded.has_value());
  REQUIRE(rec.seen.size() == 16);
  std::vector<int> count(16, 0);
  for (const auto& s : rec.seen) {
    REQUIRE(s.position < 16);
    ++count[s.position];
    CHECK(tz_test::floats_match(s.bytes, s.position, 300000));
  }
  for (int c : count) CHECK(c == 1);
}

TEST_CASE("a verified load hands over nothing from the corrupt tensor on, and what it handed over stays intact") {
  auto bytes = model_bytes(12, 100000);
  tz::scheduler sched(2);
  auto clean = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
  bytes[clean.index().tensors[7].data_offset + 100] ^= std::byte{1};
  auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
  recorder rec;
  tz::load_options o;
  o.verify = true;
  o.range_bytes = 64 << 10;
  rec.attach(o);
  auto r = l.load(sched, {}, o);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == tz::errc::hash_mismatch);
  CHECK(r.error().message.find("t7") != std::string::npos);
  CHECK(rec.seen.size() <= 7);  // t7 and everything after it (in file order) never
  for (std::size_t i = 0; i < rec.seen.size(); ++i) {
    CAPTURE(i);
    CHECK(rec.seen[i].position == i);
    // The load failed and returned, its result is gone: the owner keeps the memory, unchanged.
    CHECK(tz_test::floats_match(rec.seen[i].view, i, 100000));
  }
}

TEST_CASE("encrypted tensors are handed over decrypted; caller memory is handed over as the caller's spans") {
  auto key = tz::crypto::secret_key::random().value();
  auto enc = tz::format::tensorizer_encryptor::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  auto bytes = tz_test::write_floats(6, 500000, &enc);
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
  std::vector<std::vector<std::byte>> mine;
  std::vector<tz::tensor_destination> dst;
  for (std::size_t i = 0; i < 6; ++i) {
    mine.emplace_back(l.index().tensors[i].deserialized_bytes);
    dst.push_back({i, mine.back()});
  }
  recorder rec;
  tz::load_options o;
  o.decryption = tz::format::decryption::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  o.range_bytes = 192 << 10;
  rec.attach(o);
  REQUIRE(l.load_into(sched, dst, o).has_value());
  REQUIRE(rec.seen.size() == 6);
  for (std::size_t i = 0; i < 6; ++i) {
    CAPTURE(i);
    CHECK(rec.seen[i].view.data() == mine[i].data());
    CHECK(rec.seen[i].owner == nullptr);  // the caller's memory
    CHECK(tz_test::floats_match(rec.seen[i].bytes, i, 500000));
  }
}

TEST_CASE("a callback that throws ends the handovers, not the load") {
  auto bytes = model_bytes(8, 50000);
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(bytes)).value();
  std::atomic<int> calls{0};
  tz::load_options o;
  o.on_tensor_ready = [&](const tz::tensor_ready&) {
    if (calls.fetch_add(1) == 2) throw std::runtime_error("consumer broke");
  };
  auto loaded = l.load(sched, {}, o);
  REQUIRE(loaded.has_value());
  CHECK(calls.load() == 3);
  for (std::size_t i = 0; i < 8; ++i) CHECK(tz_test::floats_match(loaded->data(i), i, 50000));
}

TEST_CASE("tensors as they land from a remote source: the first wave of reads is short, the rest full size") {
  // A source that asks for reads in flight (byte_source::read_concurrency, as HTTP and S3 do): with
  // a consumer, the reads before readers x 1 MiB into the file are at most 1 MiB (plan_options'
  // ramp), so the first tensors come after short reads; without one, every read is full size.
  auto bytes = model_bytes(24, 600000);
  auto src = std::make_shared<tz::memory_source>(bytes);
  src->set_read_concurrency(4);
  tz::scheduler sched(2);
  auto l = tz::loader::open(sched, src).value();
  const std::uint64_t first = l.index().tensors.front().header_offset;
  auto read_spans = [&](bool consumer) {
    tz::load_options o;
    o.readers = 4;
    o.range_bytes = 4 << 20;
    o.trace = std::make_shared<tz::load_trace>();
    if (consumer) o.on_tensor_ready = [](const tz::tensor_ready&) {};
    REQUIRE(l.load(sched, {}, o).has_value());
    const tz_test::temp_dir dir("tz-ready-ramp");
    REQUIRE(o.trace->write(dir.file("trace.json")).has_value());
    const auto raw = tz_test::read_file(dir.file("trace.json"));
    auto events = boost::json::parse(std::string(reinterpret_cast<const char*>(raw.data()), raw.size()));
    std::vector<std::pair<std::uint64_t, std::uint64_t>> reads;  // (offset, bytes)
    const auto& list = events.is_array() ? events.as_array() : events.at("traceEvents").as_array();
    for (const auto& e : list)
      if (e.at("name") == "read") reads.emplace_back(e.at("args").at("offset").to_number<std::uint64_t>(),
                                                      e.at("args").at("bytes").to_number<std::uint64_t>());
    return reads;
  };
  const auto ramped = read_spans(true), plain = read_spans(false);
  bool longer_later = false;
  for (const auto& [offset, n] : ramped) {
    CAPTURE(offset);
    if (offset < first + 4 * (1 << 20)) CHECK(n <= (1u << 20));
    longer_later = longer_later || n > (1u << 20);
  }
  CHECK(longer_later);  // the ramp ends: full-size reads after it
  CHECK(ramped.size() > plain.size());
  for (const auto& [offset, n] : plain) {
    CAPTURE(offset);
    CHECK((n > (1u << 20) || offset + n + 4 * 600000 > bytes.size()));  // full size but at the end
  }
}

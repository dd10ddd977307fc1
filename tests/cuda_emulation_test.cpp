// Loads to device memory on the host emulation of the CUDA runtime (tests/cuda_emulation), where
// faults can be injected: a copy failing at any position of a load fails that load with an error
// naming the upload, never hangs, returns every lease and frees every allocation; device memory
// running out is a clear error; a load onto cuda:1 lands there and leaves the current device alone;
// the ring path never uploads from pageable memory and holds no more pinned memory than its ring;
// corrupted files (random bytes changed, or cut short) fail on the device path exactly where they
// fail on the host path, and load the same bytes where they load.
#include "emulation_case.hpp"
#include "tz/format/encryption.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <map>
#include <optional>
#include <random>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <chrono>
#include <thread>
#include <vector>

using namespace emu_test;  // the emulated suites' shared helpers (emulation_case.hpp)

TEST_CASE("the emulation is what this executable runs on") {
  CHECK(tz::cuda::built_with_cuda());
  CHECK(tz::cuda::available());
  auto info = tz::cuda::describe_device(0);
  REQUIRE(ok(info));
  CHECK(info->name.find("emulation") != std::string::npos);
  check_nothing_alive();
}

TEST_CASE("a copy failing at any position fails the load, never hangs, and leaves nothing behind") {
  emulation_case scope;
  const std::size_t base = 700 * kib;
  const auto plain = write_floats(12, base);
  auto key = tz::crypto::secret_key::random().value();
  auto enc = tz::format::tensorizer_encryptor::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  const auto encrypted = write_floats(3, 5 * mib, &enc);  // split across 2 MiB slots (one cipher chunk)
  {
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0, 3).value();
    for (bool enc_file : {false, true}) {
      CAPTURE(enc_file);
      auto src = std::make_shared<tz::memory_source>(enc_file ? encrypted : plain, enc_file ? "mem-enc" : "mem-plain");
      tz::device_load_options o;
      o.slot_count = 4;
      o.slot_bytes = 2 * mib;
      o.verify = true;
      if (enc_file) o.decryption = tz::format::decryption::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
      // How many copies one load makes, from a clean run.
      const auto before = emu::snapshot().copies;
      {
        auto t = load(sched, *ctx, src, o);
        REQUIRE(ok(t));
        CHECK(all_floats_match(*t, enc_file ? 5 * mib : base));
      }
      const auto pinned = ctx->pinned_bytes();  // the one ring, made by that load and kept
      const auto copies = emu::snapshot().copies - before;
      REQUIRE(copies >= 4);
      for (std::uint64_t nth = 1; nth <= copies; ++nth) {
        CAPTURE(nth);
        emu::fail_copy(nth);
        auto t = load(sched, *ctx, src, o);
        REQUIRE_FALSE(t.has_value());
        CHECK(t.error().code == tz::errc::cuda);
        CHECK(t.error().message.find("cudaErrorIllegalAddress") != std::string::npos);
        CHECK(t.error().message.find("upload of") != std::string::npos);
        {  // every lease came back, and the load gave the ring back to the context's pool
          auto ring = ctx->take_ring(4, 2 * mib).value();
          CHECK(all_slots_free(ring.get()));
        }
        CHECK(ctx->pinned_bytes() == pinned);  // no new ring was made
        CHECK(emu::snapshot().device_allocations == 0);  // the failed load's destination is freed
        emu::fail_copy(0);
        emu::clear_sticky_error();
      }
      // The same context and ring load the file again once CUDA's context is clean.
      auto again = load(sched, *ctx, src, o);
      REQUIRE(ok(again));
      CHECK(all_floats_match(*again, enc_file ? 5 * mib : base));
    }
  }
  check_nothing_alive();
}

TEST_CASE("an uploader created after a fault reports it, and destroying one mid-fault reports every completion") {
  emulation_case scope;
  std::atomic<int> called{0}, failed{0};
  int enqueued = 0;
  bool enqueue_failed = false;
  {
    auto up = tz::cuda::uploader::create(0, 2).value();
    auto host = tz::cuda::alloc_pinned(64 * kib).value();
    auto dev = tz::cuda::alloc_device(0, 64 * kib).value();
    // The third copy faults. The first two are enqueued before any fault exists; from the third on,
    // the fault may already be visible to an enqueue, even to the third's own event record (its copy
    // can run between cudaMemcpyAsync and cudaEventRecord), and then that upload reports it instead.
    emu::fail_copy(3);
    for (int i = 0; i < 4; ++i) {
      auto t = up.upload(host.bytes().subspan(static_cast<std::size_t>(i) * 16 * kib, 16 * kib), dev,
                         static_cast<std::size_t>(i) * 16 * kib, [&](tz::result<void> r) {
                           ++called;
                           if (!r) ++failed;
                         });
      if (!t) {
        enqueue_failed = true;
        break;
      }
      ++enqueued;
    }
    REQUIRE(enqueued >= 2);
    CHECK_FALSE(up.synchronize().has_value());
    auto more = tz::cuda::uploader::create(0, 1);
    CHECK_FALSE(more.has_value());  // a sticky fault: every later call reports it
  }  // the uploader's destructor reports every completion before it returns
  emu::clear_sticky_error();
  CHECK(called == enqueued);
  CHECK((failed >= 1 || enqueue_failed));  // the fault was reported, by a completion or an enqueue
  check_nothing_alive();
}

TEST_CASE("running out of device memory fails the load naming the allocation") {
  emu::settings s;
  s.device_bytes = 2 * mib;
  emulation_case scope(s);
  {
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0).value();
    auto src = std::make_shared<tz::memory_source>(write_floats(4, 1 * mib), "mem-oom");
    auto t = load(sched, *ctx, src, {});
    REQUIRE_FALSE(t.has_value());
    CHECK(t.error().code == tz::errc::cuda);
    CHECK(t.error().message.find("cudaMalloc") != std::string::npos);
    CHECK(t.error().message.find("cudaErrorMemoryAllocation") != std::string::npos);
    CHECK(t.error().message.find("cuda:0") != std::string::npos);
    auto small = std::make_shared<tz::memory_source>(write_floats(2, 512 * kib), "mem-fits");
    auto fits = load(sched, *ctx, small, {});
    REQUIRE(ok(fits));
    CHECK(all_floats_match(*fits, 512 * kib));
  }
  check_nothing_alive();
}

TEST_CASE("a load onto cuda:1 lands there, and the caller's current device stays current") {
  emu::settings s;
  s.device_count = 2;
  emulation_case scope(s);
  REQUIRE(emu::current_device() == 0);
  {
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(1).value();
    auto& up = ctx->uploader();
    CHECK(emu::current_device() == 0);
    auto src = std::make_shared<tz::memory_source>(write_floats(6, 700 * kib), "mem-dev1");
    tz::device_load_options o;
    o.slot_count = 3;
    o.slot_bytes = 512 * kib;
    auto t = load(sched, *ctx, src, o);
    REQUIRE(ok(t));
    CHECK(t->device() == 1);
    CHECK(t->buffer().device() == 1);
    CHECK(all_floats_match(*t, 700 * kib));
    CHECK(emu::current_device() == 0);
    auto on0 = tz::cuda::alloc_device(0, 4096).value();
    auto host = tz::cuda::alloc_pinned(4096).value();
    auto wrong = up.upload(host.bytes(), on0, 0);  // the uploader is on cuda:1
    REQUIRE_FALSE(wrong.has_value());
    CHECK(wrong.error().code == tz::errc::invalid_argument);
    auto missing = tz::cuda::uploader::create(2);
    REQUIRE_FALSE(missing.has_value());
    CHECK(missing.error().code == tz::errc::no_device);
  }
  check_nothing_alive();
}

TEST_CASE("the ring path uploads only from pinned memory and holds no more of it than the ring") {
  emulation_case scope;
  {
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0).value();
    auto src = std::make_shared<tz::memory_source>(write_floats(40, 200 * kib), "mem-pinned");
    emu::reset_peaks();
    const auto before = emu::snapshot();
    tz::device_load_options o;
    o.slot_count = 5;
    o.slot_bytes = 256 * kib;
    auto t = load(sched, *ctx, src, o);
    REQUIRE(ok(t));
    CHECK(all_floats_match(*t, 200 * kib));
    const auto after = emu::snapshot();
    CHECK(after.pageable_copies == before.pageable_copies);
    CHECK(after.copies > before.copies);
    // The ring is the only pinned memory: one registered range per slot (make_pinned_ring pins
    // huge-page memory in place, slot by slot), kept by the context for the next load; no
    // cudaHostAlloc at all. Every slot was pinned before it carried a copy (no pageable copies).
    CHECK(after.registrations == before.registrations + o.slot_count);
    CHECK(after.host_allocations == before.host_allocations);
    CHECK(ctx->pinned_bytes() == t->ring_bytes());
    CHECK(t->pinned_bytes_max() <= t->ring_bytes());
    CHECK(t->readers() == 3);  // --readers 0: 2 per worker (4), at most 3/4 of the 5 slots (3)
    o.readers = 2;
    auto again = load(sched, *ctx, src, o);  // reuses it: no new pinned memory
    REQUIRE(ok(again));
    CHECK(again->readers() == 2);
    CHECK(emu::snapshot().registrations == before.registrations + o.slot_count);
    CHECK(emu::snapshot().pageable_copies == before.pageable_copies);
  }
  check_nothing_alive();
}

TEST_CASE("a remote source's device load keeps more reads in flight, within a larger ring") {
  emulation_case scope;
  {
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0).value();
    auto src = std::make_shared<tz::memory_source>(write_floats(40, 200 * kib), "mem-remote");
    src->set_read_concurrency(40);  // what an HTTP/S3 source asks for
    tz::device_load_options o;
    o.slot_bytes = 64 * kib;
    CHECK(o.slots(*src) == tz::device_load_options::remote_slot_count);
    auto t = load(sched, *ctx, src, o);
    REQUIRE(ok(t));
    CHECK(all_floats_match(*t, 200 * kib));
    CHECK(t->readers() == 40);  // the source's count: under 3/4 of the 64 slots
    CHECK(t->ring_bytes() >= tz::device_load_options::remote_slot_count * o.slot_bytes);
    CHECK(t->pinned_bytes_max() <= t->ring_bytes());
    src->set_read_concurrency(0);  // a local file: the default ring and count
    CHECK(o.slots(*src) == tz::device_load_options::default_slot_count);
  }
  check_nothing_alive();
}

TEST_CASE("one device context serves concurrent loads, each with a ring of its own, and later loads reuse them") {
  emulation_case scope;
  {
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0, 2).value();
    tz::device_load_options o;
    o.slot_count = 3;
    o.slot_bytes = 256 * kib;
    const auto a = write_floats(9, 300 * kib), b = write_floats(5, 500 * kib);
    constexpr int loads_per_thread = 6;
    std::atomic<int> good{0};
    auto loop = [&](const std::vector<std::byte>& file, std::size_t base, const char* name) {
      for (int k = 0; k < loads_per_thread; ++k) {
        auto t = load(sched, *ctx, std::make_shared<tz::memory_source>(file, name), o);
        if (t && all_floats_match(*t, base)) ++good;
      }
    };
    std::thread first(loop, std::cref(a), 300 * kib, "mem-a"), second(loop, std::cref(b), 500 * kib, "mem-b");
    first.join();
    second.join();
    CHECK(good.load() == 2 * loads_per_thread);
    // At most one ring per load running at once: two, never one per load.
    const std::size_t ring_bytes = 3 * (256 * kib + tz::page_bytes);
    CHECK(ctx->pinned_bytes() >= ring_bytes);
    CHECK(ctx->pinned_bytes() <= 2 * ring_bytes);
    const auto before = emu::snapshot().registrations;
    auto again = load(sched, *ctx, std::make_shared<tz::memory_source>(a, "mem-a"), o);
    REQUIRE(ok(again));
    CHECK(all_floats_match(*again, 300 * kib));
    CHECK(emu::snapshot().registrations == before);  // an idle ring was taken, none made
  }
  check_nothing_alive();
}

namespace {

// One corrupted copy of `file`: 1-3 random bytes changed (anywhere: header, index, tensor headers,
// data), or the file cut short, chosen by `rng`.
std::vector<std::byte> corrupt(std::vector<std::byte> file, std::mt19937_64& rng) {
  std::uniform_int_distribution<std::size_t> at(0, file.size() - 1);
  if (rng() % 8 == 0) {
    file.resize(at(rng));
    return file;
  }
  const int n = 1 + static_cast<int>(rng() % 3);
  for (int k = 0; k < n; ++k) file[at(rng)] ^= static_cast<std::byte>(1 + rng() % 255);
  return file;
}

// What one path made of a file: an error message, or each tensor's bytes by name.
struct outcome {
  std::optional<std::string> error;
  std::map<std::string, std::vector<std::byte>> tensors;
};

outcome host_load(tz::scheduler& sched, std::shared_ptr<tz::byte_source> src, bool verify,
                  const tz::format::decryption* decryption) {
  auto l = tz::loader::open(sched, src);
  if (!l) return {l.error().message, {}};
  tz::load_options o;
  o.verify = verify;
  if (decryption != nullptr) o.decryption = *decryption;
  auto t = l->load(sched, {}, o);
  if (!t) return {t.error().message, {}};
  outcome out;
  for (std::size_t i = 0; i < t->size(); ++i) {
    auto d = t->data(i);
    out.tensors[t->entry(i).name].assign(d.begin(), d.end());
  }
  return out;
}

outcome device_load(tz::scheduler& sched, tz::device_context& ctx, std::shared_ptr<tz::byte_source> src, bool verify,
                    const tz::format::decryption* decryption) {
  auto l = tz::loader::open(sched, src);
  if (!l) return {l.error().message, {}};
  tz::device_load_options o;
  o.slot_count = 4;
  o.slot_bytes = 64 * kib;
  o.verify = verify;
  if (decryption) o.decryption = *decryption;
  auto t = tz::load_to_device(sched, ctx, *l, {}, o);
  if (!t) return {t.error().message, {}};
  outcome out;
  for (std::size_t i = 0; i < t->size(); ++i) {
    std::vector<std::byte> got(t->size_bytes(i));
    REQUIRE(ok(tz::cuda::download(t->buffer(), t->device_offset(i), got)));
    out.tensors[t->entry(i).name] = std::move(got);
  }
  return out;
}

}  // namespace

TEST_CASE("corrupted files: the device path fails where the host path fails, and loads the same bytes otherwise") {
  emulation_case scope;
  auto key = tz::crypto::secret_key::random().value();
  auto enc = tz::format::tensorizer_encryptor::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  const auto decryption = tz::format::decryption::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  struct variant {
    const char* what;
    std::vector<std::byte> file;
    bool verify;
    bool encrypted;
  };
  // Tensors of 40-140 KiB through 64 KiB slots: whole tensors packed into a slot and split ones.
  const auto plain = write_floats(7, 40 * kib);
  std::vector<variant> variants = {{"plain, verified", plain, true, false},
                                   {"plain, unverified", plain, false, false},
                                   {"encrypted", write_floats(4, 40 * kib, &enc), false, true}};
  int failures = 0, loads = 0, differing = 0;
  // TZ_FUZZ_ROUNDS / TZ_FUZZ_SEED: longer or other runs by hand; CI runs 120 rounds of one seed.
  const int rounds = std::getenv("TZ_FUZZ_ROUNDS") ? std::atoi(std::getenv("TZ_FUZZ_ROUNDS")) : 120;
  const auto seed = std::getenv("TZ_FUZZ_SEED") ? std::strtoull(std::getenv("TZ_FUZZ_SEED"), nullptr, 10) : 20261122;
  {
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0, 2).value();
    std::mt19937_64 rng(seed);
    for (const auto& v : variants) {
      CAPTURE(v.what);
      const tz::format::decryption* d0 = v.encrypted ? &decryption : nullptr;
      const outcome original = host_load(sched, std::make_shared<tz::memory_source>(v.file, "mem-fuzz"), v.verify, d0);
      REQUIRE_FALSE(original.error.has_value());
      for (int round = 0; round < rounds; ++round) {
        CAPTURE(round);
        auto bytes = corrupt(v.file, rng);
        std::shared_ptr<tz::byte_source> src = std::make_shared<tz::memory_source>(bytes, "mem-fuzz");
        const tz::format::decryption* d = v.encrypted ? &decryption : nullptr;
        const outcome host = host_load(sched, src, v.verify, d);
        const outcome dev = device_load(sched, *ctx, src, v.verify, d);
        REQUIRE_MESSAGE(host.error.has_value() == dev.error.has_value(),
                        "host: " << host.error.value_or("loaded") << " | device: " << dev.error.value_or("loaded"));
        {  // every lease came back to the ring, which is back in the context's pool
          auto ring = ctx->take_ring(4, 64 * kib).value();
          CHECK(all_slots_free(ring.get()));
        }
        if (host.error) {
          ++failures;
          CHECK(dev.error->find("mem-fuzz") != std::string::npos);  // names the source
          continue;
        }
        ++loads;
        CHECK(host.tensors == dev.tensors);
        // Hashes and MACs admit no silently wrong tensor: a checked load that succeeds is the original.
        if (v.verify || v.encrypted) CHECK(dev.tensors == original.tensors);
        if (dev.tensors != original.tensors) ++differing;
      }
    }
  }
  MESSAGE(failures << " corrupted files failed on both paths, " << loads << " loaded alike (" << differing
                   << " of them, unverified, with changed tensor bytes)");
  CHECK(failures > 0);
  CHECK(loads > 0);
  check_nothing_alive();
}

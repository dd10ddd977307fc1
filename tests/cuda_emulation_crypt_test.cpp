// Decryption on the device, on the CUDA emulation (its secretbox "kernels" open each chunk with
// libsodium on the stream): the same bytes and the same named errors as the host's workers;
// readers sharing one stream keep each range's copies and kernel pairs together; the flags and
// kernel scratch come from the device context's pool, so a load after the first allocates only
// its tensors and frees nothing (a cudaFree waits for the whole device), and a reused flag from
// an earlier load never passes a chunk of this one.
#include "emulation_case.hpp"
#include "tz/cuda/secretbox.hpp"
#include "tz/format/encryption.hpp"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

using namespace emu_test;  // the emulated suites' shared helpers (emulation_case.hpp)

namespace {

tz::format::decryption decryption_of(const tz::crypto::secret_key& key) {
  return tz::format::decryption::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
}

std::vector<std::byte> sealed_floats(const tz::crypto::secret_key& key, std::size_t tensors, std::size_t bytes) {
  auto enc = tz::format::tensorizer_encryptor::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  return tz_test::write_floats(tensors, bytes, &enc);
}

}  // namespace

TEST_CASE("encrypted loads open their chunks on the device: the same bytes and the same errors as the host's workers") {
  emulation_case scope;
  auto key = tz::crypto::secret_key::random().value();
  auto enc = tz::format::tensorizer_encryptor::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  // Tensors of 3 cipher chunks (5 MiB), split over 4 MiB slots.
  auto file = write_floats(4, 5 * mib, &enc);
  const auto decryption = tz::format::decryption::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  REQUIRE(tz::cuda::secretbox_kernels_available());  // the emulation's: libsodium on the stream
  {
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0, 3).value();
    auto load_with = [&](const std::vector<std::byte>& bytes, bool on_device) {
      tz::device_load_options o;
      o.decryption = decryption;
      o.decrypt_on_device = on_device;
      return load(sched, *ctx, std::make_shared<tz::memory_source>(bytes, "mem-sealed"), o);
    };
    for (bool on_device : {true, false}) {
      CAPTURE(on_device);
      auto t = load_with(file, on_device);
      REQUIRE(ok(t));
      CHECK(all_floats_match(*t, 5 * mib));
      CHECK((t->timings().decrypt_s > 0) == !on_device);  // the host's workers decrypted, or not
    }
    // A flipped byte in the third chunk of the last tensor: both paths name that chunk alike.
    auto l = tz::loader::open(sched, std::make_shared<tz::memory_source>(file, "mem-sealed")).value();
    const auto& last = l.index().tensors.back();
    auto bad = file;
    bad[last.data_offset + 2 * (2u << 20) + 100] ^= std::byte{0x40};
    auto on_gpu = load_with(bad, true), on_host = load_with(bad, false);
    REQUIRE_FALSE(on_gpu.has_value());
    REQUIRE_FALSE(on_host.has_value());
    CHECK(on_gpu.error().code == tz::errc::crypto);
    CHECK(on_gpu.error().message == on_host.error().message);
    CHECK(on_gpu.error().message.find("chunk 2 of 3") != std::string::npos);
    // The failed loads freed their tensors' memory; what is left is the pool's idle flags buffer.
    CHECK(emu::snapshot().device_allocations == 1);
    CHECK(emu::snapshot().device_bytes == ctx->idle_device_bytes());
  }
  check_nothing_alive();
}

TEST_CASE("readers sharing one stream keep each range's copies and kernels together on it") {
  emulation_case scope;
  auto key = tz::crypto::secret_key::random().value();
  auto enc = tz::format::tensorizer_encryptor::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  const auto file = write_floats(6, 5 * mib, &enc);  // 3 chunks each, over 4 MiB slots
  {
    // Many readers and one stream: without an upload's operations kept contiguous, another
    // range's kernel pair lands between a pair's two halves and its chunks fail their MAC (as
    // they did on an H100 before the uploader held the stream while enqueueing).
    tz::scheduler sched(4);
    auto ctx = tz::device_context::create(0, 1).value();
    tz::device_load_options o;
    o.decryption = tz::format::decryption::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
    o.readers = 8;
    for (int round = 0; round < 6; ++round) {
      CAPTURE(round);
      auto t = load(sched, *ctx, std::make_shared<tz::memory_source>(file, "mem-one-stream"), o);
      REQUIRE(ok(t));
      CHECK(all_floats_match(*t, 5 * mib));
    }
  }
  check_nothing_alive();
}

TEST_CASE("an encrypted load's flags and scratch come from the context's pool: no cudaMalloc or cudaFree of its own") {
  emulation_case scope;
  const auto key = tz::crypto::secret_key::random().value();
  const auto file = sealed_floats(key, 4, 5 * mib);  // 3 cipher chunks a tensor
  {
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0, 3).value();
    tz::device_load_options o;
    o.decryption = decryption_of(key);
    auto src = [&](const std::vector<std::byte>& bytes) { return std::make_shared<tz::memory_source>(bytes, "mem-pool"); };
    REQUIRE(ok(load(sched, *ctx, src(file), o)));  // the first load makes the pooled buffer
    const auto pooled = ctx->idle_device_bytes();
    CHECK(pooled > 0);
    for (int round = 0; round < 3; ++round) {
      CAPTURE(round);
      const auto before = emu::snapshot();
      auto t = load(sched, *ctx, src(file), o);
      REQUIRE(ok(t));
      CHECK(all_floats_match(*t, 5 * mib));
      const auto after = emu::snapshot();
      CHECK(after.device_mallocs == before.device_mallocs + 1);  // the tensors' memory alone
      CHECK(after.device_frees == before.device_frees);          // nothing freed: no device-wide wait
      CHECK(ctx->idle_device_bytes() == pooled);
    }
    // Every flag in the reused buffer says 1 from the loads above: a flipped byte must still fail
    // its chunk by name.
    auto l = tz::loader::open(sched, src(file)).value();
    auto bad = file;
    bad[l.index().tensors[1].data_offset + (2u << 20) + 7] ^= std::byte{0x01};
    auto failed = load(sched, *ctx, src(bad), o);
    REQUIRE_FALSE(failed.has_value());
    CHECK(failed.error().code == tz::errc::crypto);
    CHECK(failed.error().message.find("chunk 1 of 3") != std::string::npos);
    auto good = load(sched, *ctx, src(file), o);  // every flag of the buffer says 1 again
    REQUIRE(ok(good));
    CHECK(all_floats_match(*good, 5 * mib));
    // A launch that silently never ran leaves its chunks sealed and their flags as they were (1,
    // from the load above): the load must fail, never hand out ciphertext.
    emu::skip_secretbox_launches(1);
    auto unopened = load(sched, *ctx, src(file), o);
    emu::skip_secretbox_launches(0);
    REQUIRE_FALSE(unopened.has_value());
    CHECK(unopened.error().code == tz::errc::crypto);
    auto again = load(sched, *ctx, src(file), o);
    REQUIRE(ok(again));
    CHECK(all_floats_match(*again, 5 * mib));
    // Concurrent loads each hold a buffer of their own; the pool keeps at most idle_buffers_max.
    std::atomic<int> passed{0};
    std::vector<std::thread> threads;
    for (int k = 0; k < 3; ++k) {
      threads.emplace_back([&] {
        for (int i = 0; i < 3; ++i) {
          auto t = load(sched, *ctx, src(file), o);
          if (t && all_floats_match(*t, 5 * mib)) ++passed;
        }
      });
    }
    for (auto& t : threads) t.join();
    CHECK(passed.load() == 9);
    CHECK(ctx->idle_device_bytes() >= pooled);
    CHECK(ctx->idle_device_bytes() <= tz::device_context::idle_buffers_max * pooled);
  }
  check_nothing_alive();  // the context freed its pool
}

TEST_CASE("a device buffer larger than the pool keeps is freed when given back; smaller ones are reused") {
  emulation_case scope;
  {
    auto ctx = tz::device_context::create(0, 1).value();
    const auto before = emu::snapshot();
    {
      auto big = ctx->take_device_buffer(tz::device_context::pooled_buffer_bytes_max + 1).value();
      CHECK(big.get().size_bytes() == tz::device_context::pooled_buffer_bytes_max + 1);
    }
    CHECK(ctx->idle_device_bytes() == 0);
    CHECK(emu::snapshot().device_frees == before.device_frees + 1);
    void* first = nullptr;
    {
      auto a = ctx->take_device_buffer(4 * kib).value();
      first = a.get().data();
    }
    CHECK(ctx->idle_device_bytes() == 4 * kib);
    {
      auto again = ctx->take_device_buffer(2 * kib).value();  // fits in the idle one: reused
      CHECK(again.get().data() == first);
      CHECK(ctx->idle_device_bytes() == 0);
      auto larger = ctx->take_device_buffer(8 * kib).value();  // nothing idle fits: a new one
      CHECK(larger.get().data() != first);
    }
    CHECK(ctx->idle_device_bytes() == 12 * kib);
    CHECK(emu::snapshot().device_mallocs == before.device_mallocs + 3);
  }
  check_nothing_alive();
}

TEST_CASE("an observed device load hands the observer the file's own bytes, in order, before the device opens or hashes them") {
  // A signed model's digests (load_common_options::observe) on the device sink: sealed chunks
  // opened on the device and CRC32s taken there must still reach the observer as the file holds them.
  struct recording final : tz::byte_observer {
    std::vector<std::byte> seen;
    bool in_order = true, ended = false;
    void bytes(std::uint64_t offset, std::span<const std::byte> piece) override {
      in_order = in_order && offset == seen.size();  // one chain: never called concurrently
      seen.insert(seen.end(), piece.begin(), piece.end());
    }
    void end(std::uint64_t size) override { ended = size == seen.size(); }
  };
  emulation_case scope;
  auto key = tz::crypto::secret_key::random().value();
  auto enc = tz::format::tensorizer_encryptor::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  const auto sealed = write_floats(4, 5 * mib, &enc);
  const auto plain = tz_test::write_floats(4, 5 * mib);
  {
    tz::scheduler sched(2);
    auto ctx = tz::device_context::create(0, 3).value();
    for (int mode = 0; mode < 2; ++mode) {  // encrypted, opened on the device; plain, verified (CRC32 on the device)
      CAPTURE(mode);
      const auto& file = mode == 0 ? sealed : plain;
      auto seen = std::make_shared<recording>();
      tz::device_load_options o;
      o.slot_count = 3;  // a ring smaller than the model: slots are reused while the observer hashes
      o.slot_bytes = 4 * mib;
      o.observe = seen;
      if (mode == 0) {
        o.decryption = tz::format::decryption::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
        o.decrypt_on_device = true;
      } else {
        o.verify = true;
      }
      auto t = load(sched, *ctx, std::make_shared<tz::memory_source>(file, "mem-observed"), o);
      REQUIRE(ok(t));
      CHECK(all_floats_match(*t, 5 * mib));
      CHECK(seen->in_order);
      CHECK(seen->ended);
      CHECK(seen->seen == file);
    }
  }
  check_nothing_alive();
}

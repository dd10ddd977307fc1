// The GPU secretbox-open (tz/cuda/secretbox.hpp) on a real GPU against libsodium; exits 77 without one.
#define DOCTEST_CONFIG_IMPLEMENT
#include "tz/cuda/cuda.hpp"
#include "tz/cuda/secretbox.hpp"

#include "test_bytes.hpp"

#include <cuda_runtime.h>
#include <doctest/doctest.h>
#include <sodium.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace tz::cuda;
using bytes = std::vector<std::uint8_t>;
using nonce_bytes = std::array<std::uint8_t, 24>;

constexpr std::size_t mib2 = 2 * 1024 * 1024;
const std::size_t lengths[] = {0, 1, 15, 16, 17, 63, 64, 65, 1023, 1024, 4096 + 5, mib2 - 1, mib2};

void check_cuda(cudaError_t rc) { REQUIRE_MESSAGE(rc == cudaSuccess, cudaGetErrorString(rc)); }

// One chunk sealed by libsodium, placed at `offset` bytes into a device arena.
struct chunk {
  bytes plain;
  bytes sealed;
  nonce_bytes nonce{};
  std::array<std::uint8_t, 16> mac{};
  std::size_t offset = 0;
};

// Uploads every chunk into one device arena (each at its offset), opens them all on the GPU in one
// launch_secretbox_open call and downloads the results. Returns the flags; chunks' `sealed`
// receives what the device holds afterwards.
std::vector<std::uint8_t> open_on_gpu(std::vector<chunk>& chunks, const bytes& key) {
  std::size_t arena_bytes = 16;
  for (const auto& c : chunks) arena_bytes = std::max(arena_bytes, c.offset + c.sealed.size());
  void* arena = nullptr;
  void* scratch = nullptr;
  std::uint8_t* flags = nullptr;
  check_cuda(cudaMalloc(&arena, arena_bytes));
  check_cuda(cudaMalloc(&scratch, secretbox_scratch_bytes));
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&flags), chunks.size() + 1));
  check_cuda(cudaMemset(flags, 0xaa, chunks.size() + 1));
  std::vector<secretbox_job> jobs;
  for (const auto& c : chunks) {
    auto* at = static_cast<std::uint8_t*>(arena) + c.offset;
    check_cuda(cudaMemcpy(at, c.sealed.data(), c.sealed.size(), cudaMemcpyHostToDevice));
    jobs.push_back(secretbox_job{at, c.sealed.size(), c.nonce, c.mac});
  }
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto launched = launch_secretbox_open(jobs, std::span<const std::uint8_t, 32>(key.data(), 32), flags,
                                              scratch, stream);
  REQUIRE_MESSAGE(launched.has_value(), (launched ? std::string() : launched.error().message));
  check_cuda(cudaStreamSynchronize(stream));
  std::vector<std::uint8_t> out(chunks.size() + 1);
  check_cuda(cudaMemcpy(out.data(), flags, out.size(), cudaMemcpyDeviceToHost));
  CHECK(out.back() == 0xaa);  // nothing written past the last flag
  out.pop_back();
  for (auto& c : chunks) {
    const auto* at = static_cast<const std::uint8_t*>(arena) + c.offset;
    check_cuda(cudaMemcpy(c.sealed.data(), at, c.sealed.size(), cudaMemcpyDeviceToHost));
  }
  check_cuda(cudaStreamDestroy(stream));
  check_cuda(cudaFree(flags));
  check_cuda(cudaFree(scratch));
  check_cuda(cudaFree(arena));
  return out;
}

chunk seal(std::size_t size, std::uint32_t seed, const bytes& key, const nonce_bytes& nonce) {
  chunk c;
  c.plain = tz::test::pattern<std::uint8_t>(size, seed);
  c.sealed.resize(size);
  c.nonce = nonce;
  REQUIRE(crypto_secretbox_detached(c.sealed.data(), c.mac.data(), c.plain.data(), size, nonce.data(), key.data()) ==
          0);
  return c;
}

// A tensor of `count` chunks of `chunk_size` (the last `tail` bytes long), nonces from an
// all-0xff initial nonce as the writer increments them, packed back to back from `base`.
std::vector<chunk> seal_tensor(std::size_t count, std::size_t chunk_size, std::size_t tail, std::size_t base,
                               const bytes& key) {
  nonce_bytes nonce{};
  nonce.fill(0xff);
  std::vector<chunk> out;
  std::size_t offset = base;
  for (std::size_t i = 0; i < count; ++i) {
    out.push_back(seal(i + 1 == count ? tail : chunk_size, static_cast<std::uint32_t>(i), key, nonce));
    out.back().offset = offset;
    offset += out.back().sealed.size();
    sodium_increment(nonce.data(), nonce.size());
  }
  return out;
}

TEST_CASE("every chunk-size class opens in one launch, aligned and unaligned") {
  const bytes key = tz::test::pattern<std::uint8_t>(32, 1);
  for (const std::size_t misalign : {std::size_t{0}, std::size_t{3}, std::size_t{8}}) {
    std::vector<chunk> chunks;
    std::size_t offset = 0;
    for (const std::size_t length : lengths) {
      nonce_bytes nonce{};
      const bytes n = tz::test::pattern<std::uint8_t>(24, static_cast<std::uint32_t>(length));
      std::copy(n.begin(), n.end(), nonce.begin());
      chunks.push_back(seal(length, static_cast<std::uint32_t>(length) + 5, key, nonce));
      chunks.back().offset = offset + misalign;
      offset += (length + 255) / 256 * 256 + 256;
    }
    const auto flags = open_on_gpu(chunks, key);
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      CAPTURE(misalign);
      CAPTURE(chunks[i].plain.size());
      CHECK(flags[i] == 1);
      CHECK(chunks[i].sealed == chunks[i].plain);
    }
  }
}

TEST_CASE("a tensor of 40 chunks with carrying nonces opens over three batches") {
  const bytes key = tz::test::pattern<std::uint8_t>(32, 2);
  auto chunks = seal_tensor(40, 65536, 777, 0, key);
  const auto flags = open_on_gpu(chunks, key);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    CAPTURE(i);
    CHECK(flags[i] == 1);
    CHECK(chunks[i].sealed == chunks[i].plain);
  }
}

TEST_CASE("tampered chunks get flag 0 and keep their ciphertext; the others open") {
  const bytes key = tz::test::pattern<std::uint8_t>(32, 3);
  auto chunks = seal_tensor(4, mib2, 12345, 0, key);
  chunks[1].sealed[mib2 - 1] ^= 0x80;  // the last byte of a full chunk
  chunks[3].mac[0] ^= 0x01;
  const bytes sealed1 = chunks[1].sealed, sealed3 = chunks[3].sealed;
  const auto flags = open_on_gpu(chunks, key);
  CHECK(flags == std::vector<std::uint8_t>{1, 0, 1, 0});
  CHECK(chunks[0].sealed == chunks[0].plain);
  CHECK(chunks[1].sealed == sealed1);
  CHECK(chunks[2].sealed == chunks[2].plain);
  CHECK(chunks[3].sealed == sealed3);
  // A wrong key fails every chunk.
  auto again = seal_tensor(2, 4096, 100, 0, key);
  CHECK(open_on_gpu(again, tz::test::pattern<std::uint8_t>(32, 4)) == std::vector<std::uint8_t>{0, 0});
}

TEST_CASE("null device pointers with work to do are refused before anything is enqueued") {
  std::vector<secretbox_job> jobs(1);
  jobs[0].size_bytes = 16;
  const bytes key(32, 0);
  std::uint8_t* fake = reinterpret_cast<std::uint8_t*>(16);
  const auto r = launch_secretbox_open(jobs, std::span<const std::uint8_t, 32>(key.data(), 32), fake, fake, nullptr);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == tz::errc::invalid_argument);
  CHECK(launch_secretbox_open({}, std::span<const std::uint8_t, 32>(key.data(), 32), nullptr, nullptr, nullptr)
            .has_value());
}

// Not a speed check (that belongs in bench/): prints what one 4 MiB staging slot (two 2 MiB
// chunks) costs on this GPU. Each launch first restores the ciphertext with a device-to-device
// copy (or the tags would fail and nothing be decrypted); the copies are timed alone too.
double seconds_per_round(int rounds, const std::function<void()>& round) {
  check_cuda(cudaDeviceSynchronize());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) round();
  check_cuda(cudaDeviceSynchronize());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / rounds;
}

TEST_CASE("reports the time of opening 4 MiB batches") {
  const bytes key = tz::test::pattern<std::uint8_t>(32, 5);
  auto chunks = seal_tensor(2, mib2, mib2, 0, key);
  void* arena = nullptr;
  void* pristine = nullptr;
  void* scratch = nullptr;
  std::uint8_t* flags = nullptr;
  check_cuda(cudaMalloc(&arena, 2 * mib2));
  check_cuda(cudaMalloc(&pristine, 2 * mib2));
  check_cuda(cudaMalloc(&scratch, secretbox_scratch_bytes));
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&flags), 2));
  std::vector<secretbox_job> jobs;
  for (std::size_t i = 0; i < 2; ++i) {
    auto* at = static_cast<std::uint8_t*>(pristine) + i * mib2;
    check_cuda(cudaMemcpy(at, chunks[i].sealed.data(), mib2, cudaMemcpyHostToDevice));
    jobs.push_back(secretbox_job{static_cast<std::uint8_t*>(arena) + i * mib2, mib2, chunks[i].nonce, chunks[i].mac});
  }
  const std::span<const std::uint8_t, 32> k(key.data(), 32);
  const auto restore = [&] { check_cuda(cudaMemcpyAsync(arena, pristine, 2 * mib2, cudaMemcpyDeviceToDevice, nullptr)); };
  const auto open = [&] {
    restore();
    REQUIRE(launch_secretbox_open(jobs, k, flags, scratch, nullptr).has_value());
  };
  constexpr int rounds = 200;
  seconds_per_round(5, open);  // warm-up: module load, first launches
  const double copy_s = seconds_per_round(rounds, restore);
  const double both_s = seconds_per_round(rounds, open);
  const auto enqueue_start = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) REQUIRE(launch_secretbox_open(jobs, k, flags, scratch, nullptr).has_value());
  const double enqueue_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - enqueue_start).count() / rounds;
  check_cuda(cudaDeviceSynchronize());
  const double open_s = both_s - copy_s;
  std::printf("secretbox open of 4 MiB (2 x 2 MiB chunks): %.1f us (%.1f GB/s) after subtracting a %.1f us restore "
              "copy; %.2f us of host time per launch call\n",
              open_s * 1e6, 4.0 * 1048576 / open_s / 1e9, copy_s * 1e6, enqueue_us);
  check_cuda(cudaMemcpy(chunks[0].sealed.data(), arena, mib2, cudaMemcpyDeviceToHost));
  std::uint8_t host_flags[2] = {};
  check_cuda(cudaMemcpy(host_flags, flags, 2, cudaMemcpyDeviceToHost));
  CHECK(host_flags[0] == 0);  // the last launches ran on plaintext: tags fail, nothing more is XORed
  CHECK(chunks[0].sealed == chunks[0].plain);
  check_cuda(cudaFree(flags));
  check_cuda(cudaFree(scratch));
  check_cuda(cudaFree(pristine));
  check_cuda(cudaFree(arena));
}

}  // namespace

// Decides before any case runs: without the kernels or a GPU the whole executable is skipped.
int main(int argc, char** argv) {
  if (!secretbox_kernels_available() || !available()) {
    std::printf("secretbox_gpu_test: no secretbox kernels in this build or no CUDA device: skipped (77)\n");
    return 77;
  }
  if (sodium_init() < 0) return 1;
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}

// The GPU CRC-32 (tz/cuda/crc32.hpp) on a real GPU against the library CRC; exits 77 without one.
#define DOCTEST_CONFIG_IMPLEMENT
#include "tz/crypto/hash.hpp"
#include "tz/cuda/crc32.hpp"
#include "tz/cuda/cuda.hpp"

#include "test_bytes.hpp"

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace {

using namespace tz::cuda;
using bytes = std::vector<std::uint8_t>;

constexpr std::size_t kib = 1024;
constexpr std::size_t mib = 1024 * kib;
const std::size_t size_classes[] = {0, 1, 7, 15, 16, 17, 4095, 4096, 4097, 8191, mib - 1, mib, mib + 1, 3 * mib + 5};


void check_cuda(cudaError_t rc) { REQUIRE_MESSAGE(rc == cudaSuccess, cudaGetErrorString(rc)); }

// A cudaMalloc'ed range, freed at scope end.
struct device_memory {
  void* p = nullptr;
  explicit device_memory(std::size_t size_bytes) { check_cuda(cudaMalloc(&p, size_bytes == 0 ? 16 : size_bytes)); }
  ~device_memory() { static_cast<void>(cudaFree(p)); }
  device_memory(const device_memory&) = delete;
  device_memory& operator=(const device_memory&) = delete;
  std::uint8_t* bytes() const { return static_cast<std::uint8_t*>(p); }
};

// A job as bytes [offset, offset + size) of the uploaded buffer; null_address: a null device address
// (for empty jobs, which the interface allows).
struct placed_job {
  std::size_t offset = 0;
  std::size_t size = 0;
  bool null_address = false;
};

// Uploads `host`, hashes every job in one launch_crc32 call on a stream of its own, and returns
// the results; checks that the word after the last result was left alone.
std::vector<std::uint32_t> crc_on_gpu(const bytes& host, const std::vector<placed_job>& placed) {
  device_memory arena(host.size());
  device_memory results((placed.size() + 1) * sizeof(std::uint32_t));
  check_cuda(cudaMemcpy(arena.p, host.data(), host.size(), cudaMemcpyHostToDevice));
  check_cuda(cudaMemset(results.p, 0xaa, (placed.size() + 1) * sizeof(std::uint32_t)));
  std::vector<crc32_job> jobs;
  for (const auto& j : placed) jobs.push_back({j.null_address ? nullptr : arena.bytes() + j.offset, j.size});
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto launched = launch_crc32(jobs, static_cast<std::uint32_t*>(results.p), stream);
  REQUIRE_MESSAGE(launched.has_value(), (launched ? std::string() : launched.error().message));
  check_cuda(cudaStreamSynchronize(stream));
  check_cuda(cudaStreamDestroy(stream));
  std::vector<std::uint32_t> out(placed.size() + 1);
  check_cuda(cudaMemcpy(out.data(), results.p, out.size() * sizeof(std::uint32_t), cudaMemcpyDeviceToHost));
  CHECK(out.back() == 0xaaaaaaaaU);
  out.pop_back();
  return out;
}

std::uint32_t host_crc(const bytes& host, const placed_job& j) {
  return tz::crc32(std::as_bytes(std::span(host.data() + j.offset, j.size)));
}

void check_all(const bytes& host, const std::vector<placed_job>& placed) {
  const auto got = crc_on_gpu(host, placed);
  for (std::size_t i = 0; i < placed.size(); ++i) {
    CAPTURE(i);
    CAPTURE(placed[i].offset);
    CAPTURE(placed[i].size);
    CHECK(got[i] == host_crc(host, placed[i]));
  }
}

TEST_CASE("every size class hashes in one launch, at aligned and unaligned addresses") {
  const bytes host = tz::test::pattern<std::uint8_t>(9 * mib + 64, 1);
  std::mt19937_64 gen(2);
  std::vector<std::size_t> sizes(std::begin(size_classes), std::end(size_classes));
  for (int i = 0; i < 20; ++i) sizes.push_back(gen() % (9 * mib + 1));
  for (const std::size_t misalign : {0, 1, 3, 8, 15, 16, 17}) {
    std::vector<placed_job> placed;
    for (const std::size_t size : sizes) placed.push_back({misalign, size});
    CAPTURE(misalign);
    check_all(host, placed);
  }
}

TEST_CASE("150 jobs cross three batches; empty jobs give 0, at a null address too") {
  const bytes host = tz::test::pattern<std::uint8_t>(2 * mib + 64, 3);
  std::vector<placed_job> placed;
  for (std::size_t i = 0; i < 150; ++i) {
    const std::size_t size = i % 10 == 0 ? 0 : (i * 104729) % (2 * mib);
    placed.push_back({i % 33, size, size == 0 && i % 20 == 0});
  }
  check_all(host, placed);
}

TEST_CASE("null results, or a job with bytes at a null address, are refused naming what is wrong") {
  std::vector<crc32_job> jobs(3);
  jobs[0] = {reinterpret_cast<const void*>(4096), 16};
  jobs[2].size_bytes = 16;  // null address
  auto* fake_results = reinterpret_cast<std::uint32_t*>(4096);
  const auto bad_job = launch_crc32(jobs, fake_results, nullptr);
  REQUIRE_FALSE(bad_job.has_value());
  CHECK(bad_job.error().code == tz::errc::invalid_argument);
  CHECK(bad_job.error().message.find("job 2") != std::string::npos);
  jobs[2].device_data = jobs[0].device_data;
  const auto no_results = launch_crc32(jobs, nullptr, nullptr);
  REQUIRE_FALSE(no_results.has_value());
  CHECK(no_results.error().code == tz::errc::invalid_argument);
  CHECK(launch_crc32({}, nullptr, nullptr).has_value());  // nothing to do
}

// Not a speed check (that belongs in bench/): prints what hashing 64 MiB costs on this GPU, as 64
// jobs of 1 MiB (one batch) and as one job.
TEST_CASE("reports the time of hashing 64 MiB") {
  constexpr std::size_t total = 64 * mib;
  device_memory arena(total);
  device_memory results(64 * sizeof(std::uint32_t));
  check_cuda(cudaMemset(arena.p, 0x5a, total));
  for (const std::size_t job_bytes : {mib, total}) {
    std::vector<crc32_job> jobs;
    for (std::size_t at = 0; at < total; at += job_bytes) jobs.push_back({arena.bytes() + at, job_bytes});
    const auto results_p = static_cast<std::uint32_t*>(results.p);
    REQUIRE(launch_crc32(jobs, results_p, nullptr).has_value());  // warm-up: module load
    check_cuda(cudaDeviceSynchronize());
    constexpr int rounds = 50;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < rounds; ++i) REQUIRE(launch_crc32(jobs, results_p, nullptr).has_value());
    check_cuda(cudaDeviceSynchronize());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / rounds;
    std::printf("crc32 of 64 MiB as %zu job(s) of %zu MiB: %.1f us (%.1f GB/s)\n", jobs.size(), job_bytes / mib,
                s * 1e6, static_cast<double>(total) / s / 1e9);
    std::uint32_t first = 0;
    check_cuda(cudaMemcpy(&first, results.p, sizeof first, cudaMemcpyDeviceToHost));
    const bytes same(job_bytes, 0x5a);
    CHECK(first == tz::crc32(std::as_bytes(std::span(same))));
  }
}

}  // namespace

// Decides before any case runs: without the kernels or a GPU the whole executable is skipped.
int main(int argc, char** argv) {
  if (!crc32_kernels_available() || !available()) {
    std::printf("crc32_gpu_test: no CRC-32 kernels in this build or no CUDA device: skipped (77)\n");
    return 77;
  }
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}

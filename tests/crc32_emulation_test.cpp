// launch_crc32 on the CUDA emulation (tests/cuda_emulation): the real launcher with the kernel run as
// a stream operation, behind an upload on the same stream as a verified device load uses it. The
// results match the library CRC for every size class, unaligned and over several batches; bad
// arguments are refused naming the job; a job outside device memory faults the stream.
#include "tz/crypto/hash.hpp"
#include "tz/cuda/crc32.hpp"
#include "tz/cuda/cuda.hpp"
#include "tz/cuda_emulation.hpp"

#include "test_bytes.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace emu = tz::cuda::emulation;
using namespace tz::cuda;

namespace {

constexpr std::size_t kib = 1024;
constexpr std::size_t mib = 1024 * kib;


// A clean emulated context before and after each case, even a failed one.
struct emulation_case {
  emulation_case() {
    emu::clear_sticky_error();
    REQUIRE(emu::configure({}));
  }
  ~emulation_case() {
    emu::clear_sticky_error();
    emu::configure({});
  }
};

// Uploads `host` into `dst` and runs `jobs` (device addresses, into dst) behind the copy on the
// same stream; returns the upload's outcome and, when it succeeded, the results read back.
struct hashed {
  tz::result<void> outcome;
  std::vector<std::uint32_t> crcs;
};

hashed upload_and_hash(std::span<const std::byte> host, device_buffer& dst, const std::vector<crc32_job>& jobs) {
  auto results = alloc_device(0, (jobs.size() + 1) * sizeof(std::uint32_t));
  REQUIRE(results.has_value());
  auto* words = static_cast<std::uint32_t*>(results->data());
  std::optional<tz::result<void>> done;
  {
    auto up = uploader::create(0, 2);
    REQUIRE(up.has_value());
    const upload_piece piece{host, 0};
    auto ticket = up->upload(std::span(&piece, 1), dst, [&done](tz::result<void> r) { done = std::move(r); },
                             [&](void* stream, int) { return launch_crc32(jobs, words, stream); });
    REQUIRE(ticket.has_value());
  }  // the uploader's destructor reports every completion and joins its threads: `done` is set
  REQUIRE(done.has_value());
  hashed out{*done, {}};
  if (!out.outcome) return out;
  out.crcs.resize(jobs.size() + 1);
  REQUIRE(download(*results, 0, std::as_writable_bytes(std::span(out.crcs))).has_value());
  out.crcs.pop_back();  // never written: the launcher zeroes and the kernel XORs jobs.size() words only
  return out;
}

}  // namespace

TEST_CASE("launch_crc32 behind an upload gives the library CRC of every job, unaligned, over several batches") {
  emulation_case scope;
  {
    const auto host = tz::test::pattern(3 * mib + 64, 1);
    auto dst = alloc_device(0, host.size());
    REQUIRE(dst.has_value());
    const auto* base = static_cast<const std::byte*>(dst->data());
    const std::size_t sizes[] = {0, 1, 7, 15, 16, 17, 4095, 4096, 4097, 8191, mib - 1, mib, mib + 1, 3 * mib + 5};
    std::vector<crc32_job> jobs;
    std::vector<std::span<const std::byte>> expected;
    for (std::size_t offset = 0; offset < 6; ++offset) {  // 84 jobs: two launches
      for (const std::size_t size : sizes) {
        const std::size_t at = offset * 11 % 18;  // starts 0, 11, 4, 15, 8, 1: aligned and not
        jobs.push_back({size == 0 && offset % 2 == 0 ? nullptr : base + at, size});
        expected.push_back(std::span(host).subspan(at, size));
      }
    }
    const auto got = upload_and_hash(host, *dst, jobs);
    REQUIRE_MESSAGE(got.outcome.has_value(), (got.outcome ? std::string() : got.outcome.error().message));
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      CAPTURE(i);
      CAPTURE(jobs[i].size_bytes);
      CHECK(got.crcs[i] == tz::crc32(expected[i]));
    }
  }
  CHECK(emu::snapshot().device_allocations == 0);
}

TEST_CASE("null results, or a job with bytes at a null address, are refused naming what is wrong") {
  emulation_case scope;
  auto results = alloc_device(0, 16);
  REQUIRE(results.has_value());
  auto* words = static_cast<std::uint32_t*>(results->data());
  std::vector<crc32_job> jobs(3);
  jobs[0] = {results->data(), 16};
  jobs[1].size_bytes = 0;   // empty at a null address: fine
  jobs[2].size_bytes = 16;  // bytes at a null address
  const auto bad_job = launch_crc32(jobs, words, nullptr);
  REQUIRE_FALSE(bad_job.has_value());
  CHECK(bad_job.error().code == tz::errc::invalid_argument);
  CHECK(bad_job.error().message.find("job 2 has 16 bytes at a null address") != std::string::npos);
  jobs.pop_back();
  const auto no_results = launch_crc32(jobs, nullptr, nullptr);
  REQUIRE_FALSE(no_results.has_value());
  CHECK(no_results.error().code == tz::errc::invalid_argument);
  CHECK(launch_crc32({}, nullptr, nullptr).has_value());  // nothing to do
  CHECK(crc32_kernels_available());
}

TEST_CASE("a job whose bytes are not device memory faults the stream, as the kernel would on a GPU") {
  emulation_case scope;
  {
    const auto host = tz::test::pattern(4 * kib, 2);
    auto dst = alloc_device(0, host.size());
    REQUIRE(dst.has_value());
    // Host memory passed as a device address: the launch is accepted, the kernel's read faults.
    const std::vector<crc32_job> jobs = {{dst->data(), host.size()}, {host.data(), host.size()}};
    const auto got = upload_and_hash(host, *dst, jobs);
    REQUIRE_FALSE(got.outcome.has_value());
    CHECK(got.outcome.error().code == tz::errc::cuda);
    CHECK(got.outcome.error().message.find("cudaErrorIllegalAddress") != std::string::npos);
  }
  CHECK(emu::snapshot().device_allocations == 0);
}

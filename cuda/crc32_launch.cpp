// The host side of the GPU CRC-32: checks the jobs, zeroes the results, launches a batch at a time.
// The CUDA emulation links this file too (with its own enqueue_crc32_batch), so CI runs it.
#include "crc32_batch.hpp"
#include "cuda_detail.hpp"
#include "tz/cuda/crc32.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

namespace tz::cuda {

static_assert(crc32_batch_max == crc::batch_max, "tz/cuda/crc32.hpp and crc32_math.hpp disagree");

namespace {

// Grid x is at most 2^31 - 1 CTAs of 1 MiB: a bound no device memory reaches, checked all the same.
constexpr std::uint64_t job_bytes_max = crc::cta_bytes * 0x7fffffffULL;

result<void> check_jobs(std::span<const crc32_job> jobs, const std::uint32_t* results) {
  const std::string what = "CRC-32 of " + std::to_string(jobs.size()) + " device range(s)";
  if (results == nullptr) return make_error(errc::invalid_argument, what + ": no device results array");
  if (reinterpret_cast<std::uintptr_t>(results) % alignof(std::uint32_t) != 0)
    return make_error(errc::invalid_argument, what + ": the results array is not 4-byte aligned");
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const std::string job =
        what + ": job " + std::to_string(i) + " has " + std::to_string(jobs[i].size_bytes) + " bytes";
    if (jobs[i].device_data == nullptr && jobs[i].size_bytes != 0)
      return make_error(errc::invalid_argument, job + " at a null address");
    if (jobs[i].size_bytes > job_bytes_max)
      return make_error(errc::invalid_argument, job + ", more than one launch covers");
  }
  return {};
}

// Fills `batch` with `jobs` (at most crc::batch_max) and the grid its longest job needs.
void fill_batch(detail::crc32_batch& batch, std::span<const crc32_job> jobs) {
  std::uint64_t longest = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    batch.jobs[i] = {static_cast<const std::uint8_t*>(jobs[i].device_data), jobs[i].size_bytes};
    longest = std::max<std::uint64_t>(longest, jobs[i].size_bytes);
  }
  batch.count = static_cast<std::uint32_t>(jobs.size());
  batch.ctas = static_cast<std::uint32_t>(crc::ctas_for(longest));
}

error launch_failure(std::string_view call, cudaError_t rc, std::string_view what) {
  int device = -1;
  static_cast<void>(cudaGetDevice(&device));
  return detail::failure(call, rc, device, what);
}

}  // namespace

bool crc32_kernels_available() noexcept { return true; }

result<void> launch_crc32(std::span<const crc32_job> jobs, std::uint32_t* device_results, void* cuda_stream) {
  if (jobs.empty()) return {};
  TZ_CHECK(check_jobs(jobs, device_results));
  const auto stream = static_cast<cudaStream_t>(cuda_stream);
  // Clear a stale error of an earlier call on this thread, so that what the launch returns is its own.
  static_cast<void>(cudaGetLastError());
  // The kernel XORs every span's term into its job's word: the words start at zero, in stream order.
  cudaError_t rc = cudaMemsetAsync(device_results, 0, jobs.size() * sizeof(std::uint32_t), stream);
  if (rc != cudaSuccess)
    return launch_failure("cudaMemsetAsync", rc,
                          "zeroing the results of " + std::to_string(jobs.size()) + " CRC-32 job(s)");
  detail::crc32_batch batch{};
  std::copy(std::begin(crc::host_x2k.v), std::end(crc::host_x2k.v), std::begin(batch.x2k));
  for (std::size_t first = 0; first < jobs.size(); first += crc32_batch_max) {
    fill_batch(batch, jobs.subspan(first, std::min(crc32_batch_max, jobs.size() - first)));
    rc = detail::enqueue_crc32_batch(batch, device_results + first, stream);
    if (rc != cudaSuccess)
      return launch_failure("crc32 kernel launch", rc,
                            "CRC-32 of jobs " + std::to_string(first) + ".. of " + std::to_string(jobs.size()));
  }
  return {};
}

}  // namespace tz::cuda

// CRC-32 (the zlib/gzip CRC, FORMAT.md §8.2's hash_type 0) of bytes already in device memory,
// computed on the GPU. A verified device load uploads a range and then checks its CRC here,
// behind the copy on the same stream, so the host's cores only do SHA-256.
// Names no CUDA type; builds without the CUDA stage compile a stub.
#pragma once

#include "tz/base/error.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

namespace tz::cuda {

// One run of device bytes whose CRC-32 is wanted.
struct crc32_job {
  const void* device_data = nullptr;  // device address (any alignment; 16-byte aligned is fastest)
  std::size_t size_bytes = 0;         // any size; 0 gives 0
};

// Jobs per kernel launch; launch_crc32 splits longer job lists into launches of this many.
inline constexpr std::size_t crc32_batch_max = 64;

// True when this build carries the CRC-32 kernels (the CUDA stage compiled with nvcc) or emulates
// them (the CUDA emulation); false in the null build, where launch_crc32 always fails.
bool crc32_kernels_available() noexcept;

// Enqueues, on `cuda_stream` (a cudaStream_t; nullptr is the legacy default stream), the CRC-32 of
// every job on the current device, and returns without waiting: device_results[i] receives
// crc32(0, job i's bytes) as zlib's crc32() computes it (pre- and post-inverted, reflected
// polynomial 0xEDB88320), so values combine with zlib's crc32_combine. The caller reads the
// results after the stream reaches this point (an event, or a cudaMemcpyAsync into pinned memory
// followed by a wait).
//
// Ownership: the job bytes and `device_results` (jobs.size() 4-byte words, 4-byte aligned) are
// device memory of the current device that the caller keeps alive, and does not write from
// another stream, until the stream passes this point. `jobs` is read during the call only.
//
// Fails with errc::invalid_argument (a null results array, or a job with bytes at a null
// address), errc::no_device/errc::cuda when a launch is refused, and errc::unsupported when
// !crc32_kernels_available(). Errors of the kernels themselves surface at the caller's next
// synchronization with the stream.
result<void> launch_crc32(std::span<const crc32_job> jobs, std::uint32_t* device_results, void* cuda_stream);

}  // namespace tz::cuda

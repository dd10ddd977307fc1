// Private to cuda/ and its emulation: one CRC-32 kernel launch's jobs, passed by value to the kernel.
#pragma once

#include "crc32_math.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace tz::cuda::detail {

struct crc32_batch_job {
  const std::uint8_t* data;
  std::uint64_t size_bytes;
};

// A launch's jobs and the x^(2^k) table travel as kernel parameters (about 1.3 KiB, inside the
// 4 KiB limit): no host-to-device copy of descriptors, no staging memory.
struct crc32_batch {
  crc32_batch_job jobs[crc::batch_max];
  std::uint32_t x2k[crc::x2k_count];
  std::uint32_t count;  // jobs used
  std::uint32_t ctas;   // grid x: crc::ctas_for(longest job); 0 launches nothing
};
static_assert(sizeof(crc32_batch) < 4000, "kernel parameters are limited to 4 KiB");

// Enqueues the kernel of one batch on `stream`: results[i] ^= the CRC-32 of job i, so the caller
// zeroes results[0, count) earlier on the same stream. Returns the launch error, if any (kept free
// of tz/base so that nvcc never compiles Boost). The CUDA emulation has its own definition.
cudaError_t enqueue_crc32_batch(const crc32_batch& batch, std::uint32_t* results, cudaStream_t stream);

}  // namespace tz::cuda::detail

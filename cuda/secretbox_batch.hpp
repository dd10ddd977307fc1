// Private to the CUDA build of cuda/: one kernel launch's chunks, as passed by value to the kernels.
#pragma once

#include "secretbox_math.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace tz::cuda::detail {

// One chunk as the kernels see it: where it is and the keys derive_chunk_key made for it.
struct secretbox_chunk {
  std::uint8_t* data;
  std::uint64_t size_bytes;
  sbox::chunk_key key;
  std::uint32_t mac[4];  // the expected tag as little-endian words
};

// A launch's chunks travel as kernel parameters (under 2 KiB, well inside the 4 KiB limit), so a
// launch needs no host-to-device copy of its descriptors and no staging memory.
struct secretbox_batch {
  secretbox_chunk chunks[sbox::batch_max];
  std::uint32_t count;
  sbox::launch_shape shape;
};
static_assert(sizeof(secretbox_batch) < 4000, "kernel parameters are limited to 4 KiB");

// Enqueues the two kernels of one batch on `stream`; returns the launch error, if any.
// `scratch` holds sbox::scratch_bytes (kept free of
// tz/base so that nvcc never compiles Boost); flags[i] receives chunk i's outcome.
cudaError_t enqueue_secretbox_batch(const secretbox_batch& batch, std::uint8_t* flags, void* scratch,
                                    cudaStream_t stream);

}  // namespace tz::cuda::detail

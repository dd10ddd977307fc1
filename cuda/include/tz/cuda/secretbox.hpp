// Opening XSalsa20-Poly1305 secretboxes (format/FORMAT.md §9) on the GPU, in device memory, in place.
// Names no CUDA type; builds without the CUDA stage, or on the CUDA emulation, compile a stub.
#pragma once

#include "tz/base/error.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace tz::cuda {

// One sealed chunk already in device memory: its ciphertext, its own nonce (the tensor's initial
// nonce + chunk index) and the detached MAC stored in the tensor header.
struct secretbox_job {
  void* device_data = nullptr;  // device address; decrypted in place when the MAC matches
  std::size_t size_bytes = 0;
  std::array<std::uint8_t, 24> nonce{};
  std::array<std::uint8_t, 16> mac{};
};

// Chunks per kernel launch; launch_secretbox_open splits longer job lists into launches of this many.
inline constexpr std::size_t secretbox_batch_max = 16;
// Device scratch one launch needs (the Poly1305 partial sums of each CTA): allocate it once per
// stream, e.g. with alloc_device, and reuse it for every launch on that stream.
inline constexpr std::size_t secretbox_scratch_bytes = 16 * 64 * 5 * 4;

// True when this build carries the secretbox kernels (the CUDA stage compiled with nvcc); false
// in the null build and on the CUDA emulation, where launch_secretbox_open always fails.
bool secretbox_kernels_available() noexcept;

// Enqueues, on `cuda_stream` (a cudaStream_t; nullptr is the legacy default stream), the opening
// of every job with `key` on the current device, and returns without waiting. For job i the
// kernels compute the Poly1305 tag over the ciphertext, write device_flags[i] = 1 when it equals
// the MAC and 0 otherwise, and then, only for matching chunks, XOR the keystream in place: a
// chunk that fails keeps its ciphertext, as libsodium's open does. The caller must fail the load
// when any flag is 0, reading the flags after the stream reaches this point (an event, or a
// cudaMemcpyAsync of the flags into pinned memory followed by a wait).
//
// Ownership: the job data, `device_flags` (jobs.size() bytes) and `device_scratch`
// (secretbox_scratch_bytes, 4-byte aligned) are device memory of the current device that the
// caller keeps alive, and does not touch from another stream, until the stream passes this
// point; the scratch may be reused by the next launch on the same stream. `jobs` and `key` are
// read during the call only: the chunk keys derived from `key` travel as kernel parameters, so
// nothing needs to be staged, and the host copies are wiped before returning.
//
// Fails with errc::invalid_argument (null pointers with work to do), errc::no_device/errc::cuda
// when a launch is refused, and errc::unsupported when !secretbox_kernels_available(). Errors of
// the kernels themselves surface at the caller's next synchronization with the stream.
result<void> launch_secretbox_open(std::span<const secretbox_job> jobs, std::span<const std::uint8_t, 32> key,
                                   std::uint8_t* device_flags, void* device_scratch, void* cuda_stream);

}  // namespace tz::cuda

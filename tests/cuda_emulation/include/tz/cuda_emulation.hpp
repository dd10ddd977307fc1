// Test controls of the host emulation of the CUDA runtime (cuda_runtime.h beside this directory):
// its shape (devices, memory, copy delays), fault injection and counters of what is alive.
// Only executables linked with tz::cuda_emulated have these symbols.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace tz::cuda::emulation {

struct settings {
  int device_count = 1;
  std::size_t device_bytes = std::size_t{8} << 30;  // per device; cudaMalloc beyond it fails
  // Each queued copy or fill waits a random time in [0, max] before it runs, so that a buffer
  // reused before its copy completed is caught (the emulation aborts when queued bytes change).
  std::uint32_t copy_delay_max_us = 50;
};

// Replaces the settings. Only while nothing is allocated and no stream exists; false otherwise.
bool configure(const settings& s);
settings current_settings();

// The `nth` copy enqueued from now on (1 = the next one) fails when its turn on its stream comes:
// the context then holds the sticky cudaErrorIllegalAddress, as after a real asynchronous fault,
// until clear_sticky_error().
void fail_copy(std::uint64_t nth);
// The next `n` secretbox launches (0: none) report success and run nothing, as a kernel that
// silently never ran: its chunks keep their ciphertext and their flags keep what they held.
void skip_secretbox_launches(std::uint64_t n);
// The calling thread's current device (cudaGetDevice), to check that calls restore it.
int current_device();
// Forgets the sticky error (what cudaDeviceReset would do, without destroying anything).
void clear_sticky_error();

struct counters {
  std::size_t device_allocations = 0;  // live cudaMalloc allocations, all devices
  std::size_t device_bytes = 0;
  std::size_t host_allocations = 0;  // live cudaHostAlloc allocations
  std::size_t host_bytes = 0;
  std::size_t host_bytes_max = 0;  // high-water mark of host_bytes since reset_peaks()
  std::size_t registrations = 0;   // live cudaHostRegister ranges
  std::size_t streams = 0;
  std::size_t events = 0;
  std::uint64_t copies = 0;           // host-to-device copies enqueued so far
  std::uint64_t device_mallocs = 0;   // cudaMalloc calls that allocated, so far (cudaFree waits for the device)
  std::uint64_t device_frees = 0;     // cudaFree calls that freed, so far
  std::uint64_t pageable_copies = 0;  // of which from memory neither allocated nor registered as pinned
  std::uint64_t copied_bytes = 0;
};
counters snapshot();
void reset_peaks();

// Emulated kernels (tests/cuda_emulation/secretbox.cpp, crc32.cpp): `work` runs on `stream` (a
// cudaStream_t) in stream order, after the operations queued before it and before those queued
// after; false for an unknown stream. Inside, device_bytes() gives the host backing of device
// range [p, p + n) (nullptr when it is not inside one allocation).
bool enqueue_work(void* stream, std::function<void()> work);
std::byte* device_bytes(const void* device, std::size_t size_bytes);

}  // namespace tz::cuda::emulation

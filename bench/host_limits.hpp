// Host-side references of gpu_load_bench: the host's memory bandwidth (what bounds a load through
// a bounce buffer) and what pinning a ring's memory costs, both measured in the same run.
#pragma once

#include "tz/base/error.hpp"
#include "tz/cuda/cuda.hpp"
#include "tz/engine/host_memory.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

namespace tz::bench {

inline constexpr std::size_t host_limits_mib = std::size_t{1} << 20;

// Host memory bandwidth: `threads` threads memcpy their own 256 MiB buffers a few times; each byte
// copied is one read and one write. A load from the page cache through pinned slots crosses host
// memory three times per byte (read the page cache, write the slot, the GPU's DMA read of the
// slot), so it can reach at most 2/3 of this copy rate.
inline double memcpy_gbps(unsigned threads, std::size_t size_bytes) {
  const std::size_t each = std::clamp<std::size_t>(size_bytes / threads, 16 * host_limits_mib, 256 * host_limits_mib);
  constexpr int rounds = 4;
  std::vector<std::vector<std::byte>> src(threads), dst(threads);
  for (unsigned t = 0; t < threads; ++t) src[t].assign(each, std::byte{1}), dst[t].assign(each, std::byte{0});
  std::vector<std::thread> pool;
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) std::memcpy(dst[t].data(), src[t].data(), each);
    });
  for (auto& th : pool) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(each) * rounds * threads / s / 1e9;
}

// Milliseconds to pin a ring's worth of memory two ways: cudaHostAlloc, and anonymous huge-page
// memory faulted in and then registered (cudaHostRegister: what make_pinned_ring does).
inline std::pair<double, double> pin_ms(std::size_t bytes) {
  auto ms_since = [](auto t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  auto t0 = std::chrono::steady_clock::now();
  { auto b = tz::unwrap(tz::cuda::alloc_pinned(bytes)); }
  const double host_alloc = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  {
    tz::host_buffer memory(bytes, true);
    tz::prefault(memory.bytes());
    auto b = tz::unwrap(tz::cuda::register_pinned(memory.bytes()));
  }
  return {host_alloc, ms_since(t0)};
}

}  // namespace tz::bench

// Deterministic pseudo-random bytes for tests of sources and caches (a different stream per seed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tz::test {

inline std::vector<std::byte> pattern(std::size_t n, unsigned seed = 1) {
  std::vector<std::byte> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return v;
}

}  // namespace tz::test

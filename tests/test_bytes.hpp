// Deterministic pseudo-random bytes for tests (a different stream per seed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tz::test {

// Bytes as std::byte, or as std::uint8_t where the code under test takes unsigned char pointers.
template <class Byte = std::byte>
std::vector<Byte> pattern(std::size_t n, unsigned seed = 1) {
  std::vector<Byte> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<Byte>(x >> 24);
  }
  return v;
}

}  // namespace tz::test

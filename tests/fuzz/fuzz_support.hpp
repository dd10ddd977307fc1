// Shared helpers of the libFuzzer harnesses: byte views of the input and invariant checks that abort
// (a crash libFuzzer reports and keeps), with the broken invariant printed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>

namespace tz::fuzz {

// Aborts with `what` when an invariant does not hold.
inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

inline std::span<const std::byte> bytes_of(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}

inline std::string_view text_of(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// Little-endian integer of `width` bytes at `at` (the caller checks the bounds).
inline std::uint64_t le(std::span<const std::byte> b, std::size_t at, std::size_t width) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < width; ++i) v |= std::uint64_t{std::to_integer<std::uint8_t>(b[at + i])} << (8 * i);
  return v;
}

}  // namespace tz::fuzz

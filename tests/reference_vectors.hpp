// Where the C++ tests find the reference vectors: the tz_vectors CTest fixture writes them into the
// build tree with tests/vectors/make_vectors.py (the real tensorizer); TZ_VECTORS overrides the path.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tz_test {

inline std::filesystem::path vectors_dir() {
  const char* env = std::getenv("TZ_VECTORS");
  return std::filesystem::path(env && *env ? env : TZ_VECTORS_DIR);
}

// The reference cases run as their own CTest entries (*_reference) that require the tz_vectors
// fixture; only when that fixture was skipped (no torch/tensorizer) are the files absent: exit 77.
inline void require_vectors() {
  if (std::filesystem::exists(vectors_dir() / "encrypted.manifest.json")) return;
  MESSAGE("reference vectors absent under " << vectors_dir().string()
                                            << " (the tz_vectors fixture writes them): skipped (exit 77)");
  std::exit(77);
}

}  // namespace tz_test

// Where the C++ tests find the reference vectors: the tz_vectors CTest fixture writes them into the
// build tree with tests/vectors/make_vectors.py (the real tensorizer 2.11.1); TZ_VECTORS overrides
// the path. The tz_vectors_2121 fixture writes those of tensorizer 2.12.1 (TZ_VECTORS_2121).
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

inline std::filesystem::path vectors_2121_dir() {
  const char* env = std::getenv("TZ_VECTORS_2121");
  return std::filesystem::path(env && *env ? env : TZ_VECTORS_2121_DIR);
}

// The 2.12.1 cases (suite "reference_2121") run as the entries *_reference_2121, which require the
// tz_vectors_2121 fixture; it is skipped when scripts/setup.sh has not installed tensorizer 2.12.1
// in its venv, and then so are they (exit 77).
inline void require_vectors_2121() {
  require_vectors();
  if (std::filesystem::exists(vectors_2121_dir() / "long_v5_encrypted.manifest.json")) return;
  MESSAGE("tensorizer 2.12.1 reference vectors absent under " << vectors_2121_dir().string()
          << " (the tz_vectors_2121 fixture writes them with the venv scripts/setup.sh makes): skipped (exit 77)");
  std::exit(77);
}

}  // namespace tz_test

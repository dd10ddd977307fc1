// Where the C++ tests find the reference vectors: the tz_vectors CTest fixture writes them into the
// build tree with tests/vectors/make_vectors.py (the real tensorizer 2.11.1); TZ_VECTORS overrides
// the path. The tz_vectors_2121 fixture writes those of tensorizer 2.12.1 (TZ_VECTORS_2121).
// Every case that reads them is in doctest suite "reference" (their own CTest entries, *_reference,
// which require the fixture); including this header declares that the suite needs them, so a run
// where they are absent (the fixture skipped: no torch/tensorizer) skips those cases up front.
#pragma once

#include "requirements.hpp"

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tz_test {

inline std::filesystem::path vectors_dir() {
  const char* env = std::getenv("TZ_VECTORS");
  return std::filesystem::path(env && *env ? env : TZ_VECTORS_DIR);
}

// "" when the 2.11.1 reference vectors are there, else why not (a suite_needs check).
inline std::string vectors_missing() {
  const auto dir = vectors_dir();
  if (std::filesystem::exists(dir / "encrypted.manifest.json")) return std::string();
  return "absent under " + dir.string() + " (the tz_vectors fixture writes them; TZ_VECTORS names another place)";
}

inline const suite_needs reference_needs_vectors{"reference", "the reference vectors", vectors_missing};

inline std::filesystem::path vectors_2121_dir() {
  const char* env = std::getenv("TZ_VECTORS_2121");
  return std::filesystem::path(env && *env ? env : TZ_VECTORS_2121_DIR);
}

// The 2.12.1 cases (suite "reference_2121") run as the entries *_reference_2121, which require the
// tz_vectors_2121 fixture; it is skipped when scripts/setup.sh has not installed tensorizer 2.12.1
// in its venv, and then so are they: the suite needs both sets of vectors, checked up front.
inline const suite_needs reference_2121_needs_vectors{"reference_2121", "the reference vectors", vectors_missing};
inline const suite_needs reference_2121_needs_2121{"reference_2121", "tensorizer 2.12.1's reference vectors", [] {
  const auto dir = vectors_2121_dir();
  if (std::filesystem::exists(dir / "long_v5_encrypted.manifest.json")) return std::string();
  return "absent under " + dir.string() + " (the tz_vectors_2121 fixture writes them with the venv "
         "scripts/setup.sh makes; TZ_VECTORS_2121 names another place)";
}};

}  // namespace tz_test

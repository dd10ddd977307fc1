// Where the C++ tests find the reference vectors: the tz_vectors CTest fixture writes them into the
// build tree with tests/vectors/make_vectors.py (the real tensorizer); TZ_VECTORS overrides the path.
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

inline const suite_needs reference_needs_vectors{"reference", "the reference vectors", [] {
  const auto dir = vectors_dir();
  if (std::filesystem::exists(dir / "encrypted.manifest.json")) return std::string();
  return "absent under " + dir.string() + " (the tz_vectors fixture writes them; TZ_VECTORS names another place)";
}};

}  // namespace tz_test

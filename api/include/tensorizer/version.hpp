// tensorizer/version.hpp: the package version for C++ embedders. The macros come from the generated
// tensorizer/version.h; version() is the version of the library actually loaded at run time.
#pragma once

#include "tensorizer/version.h"

namespace tensorizer {

struct version_info {
  int major = 0;
  int minor = 0;
  int patch = 0;
  const char* text = "";  // "major.minor.patch", static storage
};

// The version of the shared library this program runs against (not the headers it was built
// with: TENSORIZER_VERSION_* are those). Never fails.
version_info version() noexcept;

}  // namespace tensorizer

// A fresh directory of one test under the system's temporary directory ($TMPDIR, else /tmp), removed
// with everything in it when the object goes. Tests write only there, never into the source or build
// tree, so their binaries run from any directory on any machine.
#pragma once

#include <doctest/doctest.h>

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace tz_test {

struct temp_dir {
  std::filesystem::path path;

  // Creates <tmp>/<stem>-XXXXXX (mkdtemp: unique, mode 0700); fails the current case if it cannot.
  explicit temp_dir(std::string_view stem = "tz-test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (std::string(stem) + "-XXXXXX")).string();
    REQUIRE_MESSAGE(::mkdtemp(pattern.data()) != nullptr, "cannot create a directory like " << pattern);
    path = pattern;
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }

  // The path of `name` inside the directory.
  std::string file(std::string_view name) const { return (path / name).string(); }
};

}  // namespace tz_test

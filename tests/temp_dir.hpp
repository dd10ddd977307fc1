// A fresh directory of one test under the system's temporary directory ($TMPDIR, else /tmp), removed
// with everything in it when the object goes. Tests write only there, never into the source or build
// tree, so their binaries run from any directory on any machine. Also: reading a file's bytes back.
#pragma once

#include <doctest/doctest.h>

#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace tz_test {

// A whole file's bytes (empty when it cannot be read: the caller's checks then fail).
inline std::vector<std::byte> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

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

  // The names in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

}  // namespace tz_test

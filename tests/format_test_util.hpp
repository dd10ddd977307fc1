// Helpers shared by the format tests: reading files, the reference vectors, temp paths.
#pragma once

#include "file_reader.hpp"
#include "reference_vectors.hpp"
#include "result_printer.hpp"
#include "temp_dir.hpp"

#include <boost/json.hpp>
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tz_test {

inline void write_file(const std::filesystem::path& p, const std::vector<std::byte>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

inline boost::json::value read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return boost::json::parse(s);
}

inline void put64(std::vector<std::byte>& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<std::byte>(v >> (8 * i));
}

// Writes the mutated bytes and opens them, returning the error (the test fails if it opens).
inline tz::error open_error(const std::vector<std::byte>& bytes) {
  tz_test::temp_dir tmp;
  tz_test::write_file(tmp.path / "m.tensors", bytes);
  auto r = tz::format::file_reader::open((tmp.path / "m.tensors").string());
  if (r) {
    for (std::size_t i = 0; i < r->index().tensors.size(); ++i) {
      auto h = r->read_header(i);
      if (!h) return h.error();
    }
    FAIL("a malformed file was accepted");
  }
  return r.error();
}

// Whether the error's message contains `what`; prints the message when it does not.
inline bool says(const tz::error& e, const std::string& what) {
  const bool found = e.message.find(what) != std::string::npos;
  if (!found) MESSAGE("expected '" << what << "' in: " << e.message);
  return found;
}

}  // namespace tz_test

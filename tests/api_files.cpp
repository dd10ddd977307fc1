// api_files DIR: writes the public-API test models (tests/api_test_files.hpp) into DIR, for the C
// test program and the installed-package consumer (the tz_api_files CTest fixture, tests/api.cmake).
#include "api_test_files.hpp"

#include "tensorizer/tensorizer.hpp"

#include <cstdio>
#include <filesystem>

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: api_files DIR\n"), 2;
  const std::string dir = argv[1];
  try {
    std::filesystem::create_directories(dir);
    tz_test::write_api_test_files(dir);
    auto m = tensorizer::model::open(dir + "/plain.tensors").value();
    tz_test::corrupt_b(dir + "/plain.tensors", dir + "/corrupt.tensors", m.tensors().at(*m.find("b")).offset);
  } catch (const std::exception& e) {
    return std::fprintf(stderr, "api_files: %s\n", e.what()), 1;
  }
  return 0;
}

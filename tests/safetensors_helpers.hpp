// Shared by the safetensors suites (safetensors_test.cpp, safetensors_python_test.cpp, one
// executable): every dtype's test tensors, the check that an index describes them, a shell command's
// exit status.
#pragma once

#include "tz/format/safetensors.hpp"

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace st_test {

using namespace tz::format;

// Every byte-sized code plus the packed sub-byte ones, in safetensors' enum order.
inline const std::vector<std::string> all_codes = {"BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
                                            "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16",
                                            "I32", "U32", "F32", "C64", "F64", "I64", "U64"};

inline std::string text_of(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

inline std::vector<std::byte> random_bytes(std::mt19937_64& rng, std::size_t n, bool boolean = false) {
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(boolean ? rng() % 2 : rng() % 256);
  return out;
}

// Tensors of every dtype: a matrix, a 0-d scalar (byte-sized dtypes only) and a zero-size tensor.
struct tensor_set {
  std::vector<std::vector<std::byte>> storage;
  std::vector<st_write_tensor> tensors;
  void add(std::string name, std::string dtype, std::vector<std::uint64_t> shape, std::vector<std::byte> data) {
    storage.push_back(std::move(data));
    tensors.push_back({std::move(name), std::move(dtype), std::move(shape), {}});
  }
  std::span<const st_write_tensor> finish() {
    for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].data = storage[i];
    return tensors;
  }
};

inline tensor_set every_dtype(std::mt19937_64& rng) {
  tensor_set set;
  for (const auto& code : all_codes) {
    const unsigned bits = find_st_dtype(code)->bits;
    set.add(code + ".matrix", code, {3, 8}, random_bytes(rng, 24 * bits / 8, code == "BOOL"));
    if (bits % 8 == 0) set.add(code + ".scalar", code, {}, random_bytes(rng, bits / 8, code == "BOOL"));
    set.add(code + ".empty", code, {0, 5}, {});
  }
  return set;
}

// Checks that `index` describes exactly `tensors`, with the bytes of `file` equal to their data.
inline void check_matches(const st_index& index, std::span<const st_write_tensor> tensors, std::span<const std::byte> file) {
  REQUIRE(index.tensors.size() == tensors.size());
  for (const auto& t : tensors) {
    INFO("tensor " << t.name);
    const st_tensor* got = index.find(t.name);
    REQUIRE(got != nullptr);
    CHECK(got->dtype == t.dtype);
    CHECK(got->shape == t.shape);
    REQUIRE(got->size_bytes() == t.data.size());
    CHECK(text_of(file.subspan(got->data_begin, got->size_bytes())) == text_of(t.data));
  }
}

inline int run_command(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace st_test

// Test models of uint8 tensors whose bytes follow a pattern of (tensor, offset): what the partial
// loads (host and emulated device) compare a share, a slice or a whole load with.
#pragma once

#include "tz/format/encryption.hpp"
#include "tz/format/writer.hpp"

#include "temp_dir.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

namespace tz_test {

inline std::byte pattern(std::size_t tensor, std::size_t k) { return static_cast<std::byte>((k * 131 + tensor * 17 + k / 251) & 0xff); }

// A .tensors file of uint8 tensors of the given shapes (bytes follow pattern()), encrypted with
// `enc` when given.
inline std::vector<std::byte> make_file(const std::vector<std::vector<std::uint64_t>>& shapes,
                                 tz::format::tensorizer_encryptor* enc = nullptr) {
  const tz_test::temp_dir dir("tz-partial-load-test");
  const std::string path = dir.file("model.tensors");
  auto w = enc ? tz::format::tensor_writer::create(path, {enc}).value() : tz::format::tensor_writer::create(path).value();
  auto u8 = tz::format::dtype_from_torch("torch.uint8").value();
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    std::uint64_t n = 1;
    for (auto d : shapes[i]) n *= d;
    std::vector<std::byte> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = pattern(i, k);
    tz::format::tensor_write t;
    t.path = tz::format::plain_path("t" + std::to_string(i));
    t.dtype = u8;
    t.shape = shapes[i];
    t.data = v;
    REQUIRE(w.write(t).has_value());
  }
  REQUIRE(w.close().has_value());
  return tz_test::read_file(path);
}

}  // namespace tz_test

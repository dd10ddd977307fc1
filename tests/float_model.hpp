// Test models whose bytes say where they belong, for the device-load suites (device_load_test and
// cuda_emulation_test): tensor i, named "t<i>", is float32 holding i * 1000 + k in element k, with
// base_bytes / 4 + 3 i elements, so a misplaced or truncated piece is caught on the device.
#pragma once

#include "tz/format/writer.hpp"

#include "temp_dir.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace tz_test {

// Writes `count` such tensors with the real writer (encrypted with `enc` when given) into a file of a
// temporary directory of its own, and returns the file's bytes; the directory is removed.
inline std::vector<std::byte> write_floats(std::size_t count, std::size_t base_bytes,
                                           tz::format::tensor_encryptor* enc = nullptr) {
  const temp_dir dir("tz-float-model");
  const std::string path = dir.file("model.tensors");
  auto w = tz::format::tensor_writer::create(path, {enc});
  REQUIRE(w.has_value());
  auto f32 = tz::format::dtype_from_torch("torch.float32").value();
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<float> v(base_bytes / 4 + i * 3);
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(i * 1000 + k);
    tz::format::tensor_write t;
    t.path = tz::format::plain_path("t" + std::to_string(i));
    t.dtype = f32;
    t.shape = {v.size()};
    t.data = std::as_bytes(std::span<const float>(v));
    REQUIRE(w->write(t).has_value());
  }
  REQUIRE(w->close().has_value());
  return read_file(path);
}

// True when `got` holds exactly tensor i of a write_floats model.
inline bool floats_match(std::span<const std::byte> got, std::size_t i, std::size_t base_bytes) {
  const std::size_t n = base_bytes / 4 + i * 3;
  if (got.size() != n * 4) return false;
  for (std::size_t k = 0; k < n; ++k) {
    float f;
    std::memcpy(&f, got.data() + 4 * k, 4);
    if (f != static_cast<float>(i * 1000 + k)) return false;
  }
  return true;
}

}  // namespace tz_test

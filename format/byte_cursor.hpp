// A bounds-checked little-endian reader over a byte span, whose errors name the absolute offset.
#pragma once

#include "tz/base/error.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tz::format {

class byte_cursor {
 public:
  // `base_offset` is the absolute file offset of bytes[0]; `what` names the structure being read.
  byte_cursor(std::span<const std::byte> bytes, std::uint64_t base_offset, std::string_view source,
              std::string what)
      : bytes_(bytes), base_(base_offset), source_(source), what_(std::move(what)) {}

  std::size_t pos() const noexcept { return pos_; }
  std::size_t remaining() const noexcept { return bytes_.size() - pos_; }
  std::uint64_t offset() const noexcept { return base_ + pos_; }
  void seek(std::size_t pos) noexcept { pos_ = pos; }

  // Reads an unsigned little-endian integer of `width` bytes (1, 2, 4 or 8).
  result<std::uint64_t> uint(std::size_t width, std::string_view field) {
    field_start_ = pos_;
    if (remaining() < width) return truncated(width, field);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < width; ++i)
      v |= static_cast<std::uint64_t>(std::to_integer<std::uint8_t>(bytes_[pos_ + i])) << (8 * i);
    pos_ += width;
    return v;
  }

  result<std::span<const std::byte>> take(std::uint64_t n, std::string_view field) {
    field_start_ = pos_;
    if (remaining() < n) return truncated(n, field);
    auto out = bytes_.subspan(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return out;
  }

  result<std::string> string(std::uint64_t n, std::string_view field) {
    TZ_TRY(b, take(n, field));
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }

  // An error naming the source, the structure, the field and the absolute offset where the
  // field starts (the last field read).
  error fail(std::string_view field, const std::string& why) const {
    return make_error(errc::format, std::string(source_) + ": " + what_ + ", field " + std::string(field) +
                                        " at offset " + std::to_string(base_ + field_start_) + ": " + why);
  }

 private:
  error truncated(std::uint64_t n, std::string_view field) const {
    return fail(field, "truncated: needs " + std::to_string(n) + " bytes, only " + std::to_string(remaining()) +
                           " remain");
  }

  std::span<const std::byte> bytes_;
  std::uint64_t base_;
  std::size_t pos_ = 0;
  std::size_t field_start_ = 0;
  std::string_view source_;
  std::string what_;
};

// Reads a u8 ndim followed by ndim dimensions of dim_bytes each (4 in v1-v4, 8 for v5 long entries).
inline result<std::vector<std::uint64_t>> read_shape(byte_cursor& c, std::size_t dim_bytes) {
  TZ_TRY(ndim, c.uint(1, "ndim"));
  std::vector<std::uint64_t> shape;
  shape.reserve(ndim);
  for (std::uint64_t d = 0; d < ndim; ++d) {
    TZ_TRY(v, c.uint(dim_bytes, "shape"));
    shape.push_back(v);
  }
  return shape;
}

}  // namespace tz::format

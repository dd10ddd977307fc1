// The Redis key layout of a .tensors file (format/FORMAT.md §13): which byte ranges become which keys.
#pragma once

#include "tz/format/tensorizer.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tz::format {

// One key of a virtual file: <prefix>:<name>:<offset_bytes> = bytes.
struct redis_range {
  std::string name;
  std::uint64_t offset_bytes = 0;
  std::span<const std::byte> bytes;
};

// The keys of a .tensors file: "header" at 0 = bytes [0, first tensor header), then per tensor
// "<stored name>" at header_offset (its header) and at data_offset (its data); the end marker is
// not stored. `file` holds the whole file; the ranges point into it.
std::vector<redis_range> redis_layout(const file_index& index, std::span<const std::byte> file);

}  // namespace tz::format

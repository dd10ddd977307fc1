// dtype strings of the .tensors format (numpy "<f4", opaque "<V2\0torch.bfloat16") and their sizes.
#pragma once

#include "tz/base/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tz::format {

// A decoded dtype string. `stored` is the exact string of the file (it may contain one NUL).
struct dtype_info {
  std::string stored;       // as in the file, e.g. "<f4" or "<V2\0torch.bfloat16"s
  std::string numpy;        // the numpy part, e.g. "<V2"
  std::string torch;        // "torch.bfloat16" for opaque dtypes, the torch equivalent otherwise
  std::size_t itemsize = 0; // bytes per element
  bool opaque = false;      // stored as <numpy>\0<torch>
};

// Parses a stored dtype string: byte order '<' or '|' (or '=' / '>' rejected as unsupported),
// kind b/i/u/f/c/V, item size 1..16; at most one NUL separator; void kinds need a torch part.
result<dtype_info> parse_dtype(std::string_view stored);

// The stored dtype string for a torch dtype name ("torch.float32" -> "<f4",
// "torch.bfloat16" -> "<V2\0torch.bfloat16"). Unknown or quantized dtypes fail.
result<dtype_info> dtype_from_torch(std::string_view torch_name);

// A short display name: the torch name without "torch." ("float32", "bfloat16").
std::string dtype_display(const dtype_info& d);

}  // namespace tz::format

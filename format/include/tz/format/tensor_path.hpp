// Tensor names: plain UTF-8 or 0x1E + compact JSON array (format/FORMAT.md §5.1), decoded into paths.
#pragma once

#include "tz/base/error.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tz::format {

using path_component = std::variant<std::string, std::uint64_t>;

struct tensor_path {
  std::vector<path_component> parts;
  // True when the path is stored in structured form (anything but one string component).
  bool structured() const noexcept;
  bool operator==(const tensor_path&) const = default;
};

tensor_path plain_path(std::string name);

// Decodes stored name bytes. Structured names must be 0x1E '[' ... ']' without CR/LF, a JSON array
// of strings and non-negative integers.
result<tensor_path> decode_name(std::string_view stored);

// Appends `s` as a JSON string escaped as Python's json.dumps(ensure_ascii=True) does (what
// tensorizer's names and transformers' index files hold); invalid UTF-8 bytes are escaped as
// themselves.
void append_python_json_string(std::string& out, std::string_view s);

// Encodes a path exactly as tensorizer 2.11.1 does (compact JSON, ASCII-only escapes).
std::string encode_name(const tensor_path& path);

// Display form: the plain string, or the compact JSON array for structured paths.
std::string display_name(const tensor_path& path);

// JSON value for the CLI: a JSON string for plain names, a JSON array otherwise.
std::string json_name(const tensor_path& path);

}  // namespace tz::format

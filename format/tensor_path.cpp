// Tensor names: decoding stored names into paths and encoding paths as tensorizer 2.11.1 does.
#include "tz/format/tensor_path.hpp"

#include <boost/json.hpp>

#include <cstdio>

namespace tz::format {
namespace {

error bad_name(std::string_view stored, const std::string& why) {
  return make_error(errc::format, "invalid structured tensor name '" + std::string(stored.substr(1)) + "': " + why);
}


}  // namespace

// Appends s as a JSON string with Python's json.dumps(ensure_ascii=True) escapes.
void append_python_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (std::size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    std::uint32_t cp = c;
    std::size_t len = 1;
    if (c >= 0x80) {  // decode one UTF-8 sequence; invalid bytes are escaped as themselves
      if ((c & 0xE0) == 0xC0 && i + 1 < s.size()) { cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3F); len = 2; }
      else if ((c & 0xF0) == 0xE0 && i + 2 < s.size()) { cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F); len = 3; }
      else if ((c & 0xF8) == 0xF0 && i + 3 < s.size()) { cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F); len = 4; }
    }
    char buf[16];
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (cp < 0x20 || (cp >= 0x80 && cp < 0x10000)) {
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
          out += buf;
        } else if (cp >= 0x10000) {
          const std::uint32_t v = cp - 0x10000;
          std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          out += buf;
        } else {
          out.push_back(static_cast<char>(cp));
        }
    }
    i += len;
  }
  out.push_back('"');
}

bool tensor_path::structured() const noexcept {
  return !(parts.size() == 1 && std::holds_alternative<std::string>(parts[0]));
}

tensor_path plain_path(std::string name) { return tensor_path{{path_component{std::move(name)}}}; }

result<tensor_path> decode_name(std::string_view stored) {
  if (stored.empty()) return make_error(errc::format, "empty tensor name");
  if (stored[0] != '\x1e') return plain_path(std::string(stored));
  if (stored.size() < 3 || stored[1] != '[' || stored.back() != ']')
    return bad_name(stored, "expected 0x1E followed by a JSON array");
  if (stored.find_first_of("\r\n") != std::string_view::npos) return bad_name(stored, "contains CR or LF");
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(stored.substr(1), ec);
  if (ec || !v.is_array()) return bad_name(stored, "not a JSON array");
  tensor_path path;
  for (const auto& item : v.as_array()) {
    if (item.is_string()) {
      path.parts.emplace_back(std::string(item.as_string()));
    } else if (item.is_uint64()) {
      path.parts.emplace_back(item.as_uint64());
    } else if (item.is_int64() && item.as_int64() >= 0) {
      path.parts.emplace_back(static_cast<std::uint64_t>(item.as_int64()));
    } else {
      return bad_name(stored, "components must be strings or non-negative integers");
    }
  }
  if (path.parts.empty()) return bad_name(stored, "empty path");
  return path;
}

std::string json_name(const tensor_path& path) {
  std::string out;
  if (!path.structured()) {
    append_python_json_string(out, std::get<std::string>(path.parts[0]));
    return out;
  }
  out.push_back('[');
  for (std::size_t i = 0; i < path.parts.size(); ++i) {
    if (i) out.push_back(',');
    if (const auto* s = std::get_if<std::string>(&path.parts[i]))
      append_python_json_string(out, *s);
    else
      out += std::to_string(std::get<std::uint64_t>(path.parts[i]));
  }
  out.push_back(']');
  return out;
}

std::string encode_name(const tensor_path& path) {
  if (!path.structured()) return std::get<std::string>(path.parts[0]);
  return "\x1e" + json_name(path);
}

std::string display_name(const tensor_path& path) {
  if (!path.structured()) return std::get<std::string>(path.parts[0]);
  return json_name(path);
}

}  // namespace tz::format

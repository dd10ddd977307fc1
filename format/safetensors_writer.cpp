// safetensors writer: lays a file out as python's save_file does and writes it atomically.
#include "tz/format/safetensors.hpp"
#include "tz/base/posix_io.hpp"

#include <algorithm>
#include <numeric>

namespace tz::format {
namespace {

bool valid_utf8(std::string_view s) noexcept {
  static constexpr std::uint32_t smallest[] = {0, 0x80, 0x800, 0x10000};  // rejects overlong forms
  std::size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    std::size_t more = 0;
    std::uint32_t cp = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      more = 1, cp = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      more = 2, cp = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      more = 3, cp = lead & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= more) return false;
    for (std::size_t k = 1; k <= more; ++k) {
      const auto next = static_cast<unsigned char>(s[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (next & 0x3F);
    }
    if (cp < smallest[more] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += more + 1;
  }
  return true;
}

// A JSON string escaped exactly as serde_json does: short escapes for " \ \b \f \n \r \t,
// \u00xx (lower-case hex) for the other control characters, everything else verbatim.
void append_json_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

error bad_argument(const std::string& what) { return make_error(errc::invalid_argument, "safetensors write: " + what); }

std::string shown(std::string_view name) {
  std::string out;
  append_json_string(out, name);
  return out;
}

// Checks every tensor and metadata entry; fills each tensor's dtype rank and size.
result<void> check_inputs(std::span<const st_write_tensor> tensors, const st_metadata& metadata,
                          std::vector<unsigned>& ranks) {
  std::vector<std::string_view> names;
  for (const auto& t : tensors) {
    const std::string where = "tensor " + shown(t.name);
    if (!valid_utf8(t.name)) return bad_argument(where + ": the name is not valid UTF-8");
    if (t.name == "__metadata__") return bad_argument(where + ": the name is reserved for the metadata map");
    auto dtype = find_st_dtype(t.dtype);
    if (!dtype) return bad_argument(where + ": " + dtype.error().message);
    auto bytes = st_tensor_bytes(t.dtype, t.shape);
    if (!bytes) return bad_argument(where + ": " + bytes.error().message);
    if (*bytes != t.data.size())
      return bad_argument(where + ": holds " + std::to_string(t.data.size()) + " data bytes, expected " +
                          std::to_string(*bytes) + " for its " + std::to_string(t.shape.size()) + "-d shape of " +
                          t.dtype);
    ranks.push_back(dtype->rank);
    names.push_back(t.name);
  }
  std::sort(names.begin(), names.end());
  if (auto dup = std::adjacent_find(names.begin(), names.end()); dup != names.end())
    return bad_argument("tensor " + shown(*dup) + " is given twice");
  for (const auto& [key, value] : metadata) {
    if (!valid_utf8(key) || !valid_utf8(value))
      return bad_argument("metadata entry " + shown(key) + " is not valid UTF-8");
  }
  std::vector<std::string_view> keys;
  for (const auto& entry : metadata) keys.push_back(entry.first);
  std::sort(keys.begin(), keys.end());
  if (auto dup = std::adjacent_find(keys.begin(), keys.end()); dup != keys.end())
    return bad_argument("metadata key " + shown(*dup) + " is given twice");
  return {};
}

void append_metadata(std::string& json, const st_metadata& metadata) {
  json += "\"__metadata__\":{";
  for (std::size_t i = 0; i < metadata.size(); ++i) {
    if (i) json += ',';
    append_json_string(json, metadata[i].first);
    json += ':';
    append_json_string(json, metadata[i].second);
  }
  json += '}';
}

}  // namespace

result<st_layout> plan_safetensors(std::span<const st_write_tensor> tensors, const st_metadata& metadata) {
  std::vector<unsigned> ranks;
  ranks.reserve(tensors.size());
  TZ_CHECK(check_inputs(tensors, metadata, ranks));
  st_layout layout;
  layout.order.resize(tensors.size());
  std::iota(layout.order.begin(), layout.order.end(), std::size_t{0});
  // python's order: larger dtype ranks first (the widest types, so data stays aligned), then names.
  std::sort(layout.order.begin(), layout.order.end(), [&](std::size_t a, std::size_t b) {
    if (ranks[a] != ranks[b]) return ranks[a] > ranks[b];
    return tensors[a].name < tensors[b].name;
  });
  std::string json = "{";
  if (!metadata.empty()) append_metadata(json, metadata);
  std::uint64_t offset = 0;
  for (const std::size_t i : layout.order) {
    const auto& t = tensors[i];
    if (json.size() > 1) json += ',';
    append_json_string(json, t.name);
    json += ":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (std::size_t k = 0; k < t.shape.size(); ++k) json += (k ? "," : "") + std::to_string(t.shape[k]);
    json += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.data.size()) + "]}";
    offset += t.data.size();
  }
  json += '}';
  json.append((8 - json.size() % 8) % 8, ' ');  // python pads so that the data starts 8-aligned
  if (json.size() > st_header_max_bytes)
    return bad_argument("the header would be " + std::to_string(json.size()) + " bytes, over the limit of " +
                        std::to_string(st_header_max_bytes));
  layout.header.reserve(8 + json.size());
  for (int i = 0; i < 8; ++i) layout.header += static_cast<char>((json.size() >> (8 * i)) & 0xFF);
  layout.header += json;
  layout.file_bytes = layout.header.size() + offset;
  return layout;
}

result<void> write_safetensors(const std::string& path, std::span<const st_write_tensor> tensors,
                               const st_metadata& metadata) {
  TZ_TRY(layout, plan_safetensors(tensors, metadata));
  TZ_TRY(temp, atomic_file::create(path));
  TZ_CHECK(temp.write(std::as_bytes(std::span(layout.header))));
  for (const std::size_t i : layout.order) TZ_CHECK(temp.write(tensors[i].data));
  return temp.commit();
}

}  // namespace tz::format

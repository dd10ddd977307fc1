// Parsing and validating the .tensors file prefix and metadata index.
#include "byte_cursor.hpp"
#include "tz/format/tensorizer.hpp"

#include <map>
#include <set>

namespace tz::format {

const char* tensor_type_name(tensor_type t) noexcept {
  switch (t) {
    case tensor_type::param: return "param";
    case tensor_type::buffer: return "buffer";
    case tensor_type::state_dict: return "state_dict";
  }
  return "unknown";
}

namespace {

std::string hex_bytes(std::span<const std::byte> b) {
  static constexpr char d[] = "0123456789abcdef";
  std::string s;
  for (auto x : b) {
    auto v = std::to_integer<unsigned>(x);
    s += d[v >> 4];
    s += d[v & 15];
  }
  return s;
}

// Element count and byte size of a shape, or an error on overflow.
result<std::pair<std::uint64_t, std::uint64_t>> shape_size(const std::vector<std::uint64_t>& shape,
                                                           std::size_t itemsize, byte_cursor& c) {
  std::uint64_t count = 1;
  for (auto d : shape) {
    if (d != 0 && count > UINT64_MAX / d) return c.fail("shape", "element count overflows 64 bits");
    count *= d;
  }
  if (count > UINT64_MAX / itemsize) return c.fail("shape", "byte size overflows 64 bits");
  return std::pair{count, count * itemsize};
}

// Tracks every registered path to reject duplicates, leaf/prefix clashes and mixed key kinds.
class path_registry {
 public:
  std::string add(const tensor_path& p) {
    tensor_path prefix;
    for (std::size_t i = 0; i < p.parts.size(); ++i) {
      const bool is_int = std::holds_alternative<std::uint64_t>(p.parts[i]);
      auto key = json_name(prefix);
      auto [it, fresh] = child_kind_.emplace(key, is_int);
      if (!fresh && it->second != is_int) return "mixes string and integer keys under " + display(prefix);
      prefix.parts.push_back(p.parts[i]);
      auto here = json_name(prefix);
      if (i + 1 < p.parts.size()) {
        if (leaves_.count(here)) return "a tensor path is also a prefix of " + display_name(p);
        inner_.insert(here);
      } else if (leaves_.count(here) || inner_.count(here)) {
        return "duplicate or prefix path " + display_name(p);
      } else {
        leaves_.insert(here);
      }
    }
    return {};
  }

 private:
  static std::string display(const tensor_path& p) { return p.parts.empty() ? "the root" : display_name(p); }
  std::map<std::string, bool> child_kind_;
  std::set<std::string> leaves_, inner_;
};

}  // namespace

result<file_header> parse_file_header(std::span<const std::byte> prefix, std::uint64_t file_bytes,
                                      std::string_view source) {
  static constexpr std::byte magic[] = {std::byte{0x7c}, std::byte{0x54}, std::byte{0x5a}, std::byte{0x52},
                                        std::byte{0x7c}};
  if (prefix.size() < magic_bytes || std::memcmp(prefix.data(), magic, magic_bytes) != 0) {
    auto got = prefix.subspan(0, std::min<std::size_t>(prefix.size(), magic_bytes));
    return make_error(errc::format, std::string(source) + ": not a tensorizer file: bad magic at offset 0: expected "
                                        "7c545a527c (\"|TZR|\"), got " + (got.empty() ? "end of file" : hex_bytes(got)));
  }
  byte_cursor c(prefix, 0, source, "file header");
  c.seek(magic_bytes);
  file_header h;
  TZ_TRY(version, c.uint(4, "data_version"));
  if (version < 1 || version > max_data_version)
    return c.fail("data_version", "unsupported data version " + std::to_string(version) +
                                      " (supported: 1, 2, 3, 4, 5)");
  h.version = static_cast<std::uint32_t>(version);
  TZ_TRY(flags_bytes, c.take(32, "feature_flags"));
  for (std::size_t i = 1; i < 32; ++i)
    if (flags_bytes[i] != std::byte{0}) return c.fail("feature_flags", "unknown feature flag bits set");
  h.flags = std::to_integer<std::uint64_t>(flags_bytes[0]);
  if ((h.flags & ~known_flags) != 0)
    return c.fail("feature_flags", "unsupported feature flags " + std::to_string(h.flags) + " (known: bit 0 encrypted, "
                                   "bit 1 versioned_headers)");
  // tensorizer 2.12 refuses the tagged-metadata flag below version 5 (format/FORMAT.md §16.1).
  if (h.has_tagged_metadata() && h.version < 5)
    return c.fail("feature_flags", "feature flag versioned_headers (2) needs data version 5, the file has version " +
                                   std::to_string(h.version));
  TZ_TRY(tensor_size, c.uint(8, "tensor_size"));
  TZ_CHECK(c.take(8, "reserved"));
  TZ_TRY(count, c.uint(8, "tensor_count"));
  TZ_TRY(metadata_bytes, c.uint(8, "metadata_len"));
  h.tensor_size = tensor_size;
  h.tensor_count = count;
  h.metadata_bytes = metadata_bytes;
  // file_bytes comes from the byte source, not from the prefix: it may be under 73 (a source that
  // reports a short size), and the subtraction must not wrap.
  if (metadata_bytes > max_metadata_bytes || file_bytes < file_prefix_bytes ||
      metadata_bytes > file_bytes - file_prefix_bytes)
    return c.fail("metadata_len", "metadata block of " + std::to_string(metadata_bytes) +
                                      " bytes at offset 73 runs past the end of the file (" +
                                      std::to_string(file_bytes) + " bytes)");
  if (count == 0 || metadata_bytes == 0) return c.fail("tensor_count", "the tensor index in the file is empty");
  if (count > metadata_bytes / 29)
    return c.fail("tensor_count", std::to_string(count) + " tensors cannot fit in a metadata block of " +
                                      std::to_string(metadata_bytes) + " bytes");
  return h;
}

namespace {

// Reads the fields of metadata entry i (format/FORMAT.md §4.2), after its u32 tag when the file's
// flag bit 1 says every entry has one (§16.1); a tag of 5 means u64 dimensions.
result<tensor_entry> read_entry(byte_cursor& c, bool tagged, std::uint64_t i) {
  tensor_entry e;
  if (tagged) {
    TZ_TRY(tag, c.uint(4, "metadata_version"));
    if (tag != 1 && tag != 5)
      return c.fail("metadata_version", "tensor " + std::to_string(i) + ": unknown entry version " +
                                            std::to_string(tag) + " (expected 1 or 5)");
    e.metadata_version = static_cast<std::uint32_t>(tag);
  }
  TZ_TRY(name_len, c.uint(2, "name_len"));
  TZ_TRY(name, c.string(name_len, "name"));
  auto path = decode_name(name);
  if (!path) return c.fail("name", "tensor " + std::to_string(i) + ": " + path.error().message);
  e.name = std::move(name);
  e.path = std::move(*path);
  TZ_TRY(type, c.uint(1, "tensor_type"));
  if (type > 2) return c.fail("tensor_type", "tensor '" + e.name + "': unknown tensor type " + std::to_string(type));
  e.type = static_cast<tensor_type>(type);
  TZ_TRY(dtype_len, c.uint(1, "dtype_len"));
  TZ_TRY(dtype, c.string(dtype_len, "dtype"));
  auto d = parse_dtype(dtype);
  if (!d) return c.fail("dtype", "tensor '" + e.name + "': " + d.error().message);
  e.dtype = std::move(*d);
  TZ_TRY(shape, read_shape(c, e.metadata_version == 5 ? 8 : 4));
  e.shape = std::move(shape);
  TZ_TRY(sizes, shape_size(e.shape, e.dtype.itemsize, c));
  e.element_count = sizes.first;
  e.deserialized_bytes = sizes.second;
  TZ_TRY(header_offset, c.uint(8, "header_offset"));
  TZ_TRY(data_offset, c.uint(8, "data_offset"));
  TZ_TRY(data_length, c.uint(8, "data_length"));
  e.header_offset = header_offset;
  e.data_offset = data_offset;
  e.data_length = data_length;
  return e;
}

// Checks where an entry puts its tensor: after the previous one, data right after a sanely sized
// header, inside the file, and as long as its dtype and shape say (unless data-less).
result<void> check_placement(const byte_cursor& c, const tensor_entry& e, std::uint64_t previous_end,
                             std::uint64_t file_bytes) {
  const std::string who = "tensor '" + display_name(e.path) + "'";
  if (e.header_offset < previous_end)
    return c.fail("header_offset", who + ": header offset " + std::to_string(e.header_offset) +
                                       " overlaps the previous entry ending at " + std::to_string(previous_end));
  if (e.data_offset <= e.header_offset || e.data_offset - e.header_offset > max_tensor_header_bytes)
    return c.fail("data_offset", who + ": data offset " + std::to_string(e.data_offset) +
                                     " is not within a sane distance after header offset " +
                                     std::to_string(e.header_offset));
  if (e.data_length > file_bytes || e.data_offset > file_bytes - e.data_length)
    return c.fail("data_length", who + ": data [" + std::to_string(e.data_offset) + ", +" +
                                     std::to_string(e.data_length) + ") runs past the end of the file (" +
                                     std::to_string(file_bytes) + " bytes)");
  if (e.data_length != 0 && e.data_length != e.deserialized_bytes)
    return c.fail("data_length", who + ": expected " + std::to_string(e.deserialized_bytes) +
                                     " bytes for its dtype and shape, the entry says " + std::to_string(e.data_length));
  return {};
}

}  // namespace

result<file_index> parse_index(const file_header& header, std::span<const std::byte> metadata,
                               std::uint64_t file_bytes, std::string source) {
  file_index index;
  index.source = std::move(source);
  index.header = header;
  index.file_bytes = file_bytes;
  index.tensors.reserve(header.tensor_count);
  std::uint64_t previous_end = file_prefix_bytes + header.metadata_bytes;
  path_registry paths;
  byte_cursor c(metadata, file_prefix_bytes, index.source, "metadata");
  for (std::uint64_t i = 0; i < header.tensor_count; ++i) {
    TZ_TRY(e, read_entry(c, header.has_tagged_metadata(), i));
    TZ_CHECK(check_placement(c, e, previous_end, file_bytes));
    if (auto clash = paths.add(e.path); !clash.empty()) return c.fail("name", "conflicting tensor paths: " + clash);
    previous_end = e.end_offset();
    index.tensors.push_back(std::move(e));
  }
  return index;
}

}  // namespace tz::format

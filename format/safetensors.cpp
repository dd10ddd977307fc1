// safetensors: the dtype table, header parsing and validation, and the file-based index reader.
#include "tz/format/safetensors.hpp"
#include "tz/base/posix_io.hpp"

// Boost.JSON's implementation is compiled once for the project, in format/json.cpp.
#include <boost/json.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <system_error>

namespace tz::format {
namespace {

namespace json = boost::json;

// safetensors 0.8's Dtype enum, in declaration order (the rank the writer sorts by).
constexpr std::array<st_dtype, 22> st_dtypes{{
    {"BOOL", 8, "torch.bool", 0},
    {"F4", 4, "torch.float4_e2m1fn_x2", 1},
    {"F6_E2M3", 6, "", 2},
    {"F6_E3M2", 6, "", 3},
    {"U8", 8, "torch.uint8", 4},
    {"I8", 8, "torch.int8", 5},
    {"F8_E5M2", 8, "torch.float8_e5m2", 6},
    {"F8_E4M3", 8, "torch.float8_e4m3fn", 7},
    {"F8_E8M0", 8, "torch.float8_e8m0fnu", 8},
    {"F8_E4M3FNUZ", 8, "torch.float8_e4m3fnuz", 9},
    {"F8_E5M2FNUZ", 8, "torch.float8_e5m2fnuz", 10},
    {"I16", 16, "torch.int16", 11},
    {"U16", 16, "torch.uint16", 12},
    {"F16", 16, "torch.float16", 13},
    {"BF16", 16, "torch.bfloat16", 14},
    {"I32", 32, "torch.int32", 15},
    {"U32", 32, "torch.uint32", 16},
    {"F32", 32, "torch.float32", 17},
    {"C64", 64, "torch.complex64", 18},
    {"F64", 64, "torch.float64", 19},
    {"I64", 64, "torch.int64", 20},
    {"U64", 64, "torch.uint64", 21},
}};

const st_dtype* lookup_dtype(std::string_view code) noexcept {
  for (const auto& d : st_dtypes)
    if (d.code == code) return &d;
  return nullptr;
}

std::string quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

// "tensor \"name\"", JSON-escaped so that control characters in a name stay visible.
std::string tensor_label(std::string_view name) {
  return "tensor " + json::serialize(json::string_view(name.data(), name.size()));
}

std::string shape_text(std::span<const std::uint64_t> shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

error format_error(std::string_view source, const std::string& what) {
  return make_error(errc::format, std::string(source) + ": safetensors " + what);
}

// Everything a header entry is checked against.
struct entry_context {
  std::string_view source;
  std::uint64_t data_offset_bytes;  // absolute offset of the data buffer
  std::uint64_t buffer_bytes;       // size of the data buffer
};

// "data_offsets [0, 12] (file bytes 80..92)": relative as in the JSON, absolute for a hex dump.
std::string offsets_text(std::uint64_t begin, std::uint64_t end, std::uint64_t base) {
  return "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] (file bytes " +
         std::to_string(base + begin) + ".." + std::to_string(base + end) + ")";
}

bool as_u64(const json::value& v, std::uint64_t& out) noexcept {
  if (v.is_uint64()) {
    out = v.get_uint64();
    return true;
  }
  if (v.is_int64() && v.get_int64() >= 0) {
    out = static_cast<std::uint64_t>(v.get_int64());
    return true;
  }
  return false;
}

// Reads a JSON array of non-negative integers; `what` names the field for the error message.
result<std::vector<std::uint64_t>> u64_list(const json::value* v, const std::string& where, std::string_view field,
                                            std::string_view source) {
  if (!v) return format_error(source, where + ": field \"" + std::string(field) + "\" is missing");
  const auto* array = v->if_array();
  if (!array)
    return format_error(source, where + ": \"" + std::string(field) + "\" is " + json::serialize(*v) +
                                    ", expected a list of non-negative integers");
  std::vector<std::uint64_t> out(array->size());
  for (std::size_t i = 0; i < array->size(); ++i) {
    if (!as_u64((*array)[i], out[i]))
      return format_error(source, where + ": \"" + std::string(field) + "\"[" + std::to_string(i) + "] is " +
                                      json::serialize((*array)[i]) + ", expected a non-negative integer");
  }
  return out;
}

// Bytes of `shape` elements of `d`; on failure `problem` says why (overflow, partial byte).
bool tensor_bytes(const st_dtype& d, std::span<const std::uint64_t> shape, std::uint64_t& bytes,
                  std::string& problem) {
  std::uint64_t elements = 1;
  for (auto dim : shape) {
    if (__builtin_mul_overflow(elements, dim, &elements)) {
      problem = "its element count overflows 64 bits";
      return false;
    }
  }
  std::uint64_t bits = 0;
  if (__builtin_mul_overflow(elements, std::uint64_t{d.bits}, &bits)) {
    problem = std::to_string(elements) + " elements of " + std::to_string(d.bits) + " bits overflow 64 bits";
    return false;
  }
  if (bits % 8 != 0) {
    problem = std::to_string(elements) + " elements of " + std::to_string(d.bits) + " bits do not fill whole bytes";
    return false;
  }
  bytes = bits / 8;
  return true;
}

// Checks one entry's data_offsets against its dtype and shape and the data buffer.
result<void> check_offsets(const std::string& where, const st_dtype& d, std::span<const std::uint64_t> shape,
                           std::span<const std::uint64_t> offsets, const entry_context& ctx) {
  if (offsets.size() != 2)
    return format_error(ctx.source, where + ": \"data_offsets\" has " + std::to_string(offsets.size()) +
                                        " entries, expected 2 ([begin, end])");
  const std::uint64_t begin = offsets[0], end = offsets[1];
  std::uint64_t expected = 0;
  std::string problem;
  if (!tensor_bytes(d, shape, expected, problem))
    return format_error(ctx.source, where + ": shape " + shape_text(shape) + " of dtype " + std::string(d.code) +
                                        " is invalid: " + problem);
  if (begin > end)
    return format_error(ctx.source, where + ": " + offsets_text(begin, end, ctx.data_offset_bytes) +
                                        " ends before it begins");
  if (end > ctx.buffer_bytes)
    return format_error(ctx.source, where + ": " + offsets_text(begin, end, ctx.data_offset_bytes) +
                                        " run past the end of the data buffer (" + std::to_string(ctx.buffer_bytes) +
                                        " bytes, file bytes " + std::to_string(ctx.data_offset_bytes) + ".." +
                                        std::to_string(ctx.data_offset_bytes + ctx.buffer_bytes) + ")");
  if (end - begin != expected)
    return format_error(ctx.source, where + ": " + offsets_text(begin, end, ctx.data_offset_bytes) + " span " +
                                        std::to_string(end - begin) + " bytes, expected " + std::to_string(expected) +
                                        " for shape " + shape_text(shape) + " of dtype " + std::string(d.code));
  return {};
}

result<st_tensor> parse_entry(std::string_view name, const json::value& v, const entry_context& ctx) {
  const std::string where = tensor_label(name);
  const auto* entry = v.if_object();
  if (!entry)
    return format_error(ctx.source, where + " is a JSON " + std::string(json::to_string(v.kind())) +
                                        ", expected an object {dtype, shape, data_offsets}");
  const auto* dtype_value = entry->if_contains("dtype");
  if (!dtype_value || !dtype_value->is_string())
    return format_error(ctx.source, where + ": \"dtype\" is " +
                                        (dtype_value ? json::serialize(*dtype_value) : std::string("missing")) +
                                        ", expected a dtype code such as \"F32\"");
  const std::string_view code = dtype_value->get_string();
  const st_dtype* d = lookup_dtype(code);
  if (!d) return format_error(ctx.source, where + ": dtype " + quoted(code) + " is not a safetensors dtype");
  TZ_TRY(shape, u64_list(entry->if_contains("shape"), where, "shape", ctx.source));
  TZ_TRY(offsets, u64_list(entry->if_contains("data_offsets"), where, "data_offsets", ctx.source));
  TZ_CHECK(check_offsets(where, *d, shape, offsets, ctx));
  st_tensor t;
  t.name = std::string(name);
  t.dtype = std::string(code);
  t.shape = std::move(shape);
  t.data_begin = ctx.data_offset_bytes + offsets[0];
  t.data_end = ctx.data_offset_bytes + offsets[1];
  return t;
}

result<st_metadata> parse_metadata(const json::value& v, std::string_view source) {
  st_metadata out;
  if (v.is_null()) return out;  // python's writer never emits it, but its reader accepts null
  const auto* map = v.if_object();
  if (!map)
    return format_error(source, "\"__metadata__\" is a JSON " + std::string(json::to_string(v.kind())) +
                                    ", expected an object of strings");
  for (const auto& kv : *map) {
    const auto* text = kv.value().if_string();
    if (!text)
      return format_error(source, "\"__metadata__\" value of key " + json::serialize(kv.key()) + " is " +
                                      json::serialize(kv.value()) + ", expected a string");
    out.emplace_back(std::string(kv.key()), std::string(*text));
  }
  return out;
}

// The tensors, sorted by offset, must tile the data buffer exactly: the spec forbids holes.
result<void> check_coverage(const std::vector<st_tensor>& tensors, const entry_context& ctx) {
  const std::uint64_t base = ctx.data_offset_bytes;
  std::uint64_t covered = 0;  // relative end of the bytes accounted for so far
  const st_tensor* previous = nullptr;
  for (const auto& t : tensors) {
    const std::uint64_t begin = t.data_begin - base;
    const std::uint64_t end = t.data_end - base;
    if (begin > covered)
      return format_error(ctx.source, "data bytes [" + std::to_string(covered) + ", " + std::to_string(begin) +
                                          ") (file bytes " + std::to_string(base + covered) + ".." +
                                          std::to_string(base + begin) +
                                          ") belong to no tensor (a hole before " +
                                          tensor_label(t.name) + " at " + offsets_text(begin, end, base) + ")");
    if (begin < covered)
      return format_error(ctx.source, tensor_label(t.name) + " at " + offsets_text(begin, end, base) +
                                          " overlaps " + tensor_label(previous->name) + " at " +
                                          offsets_text(previous->data_begin - base, covered, base));
    covered = end;
    previous = &t;
  }
  if (covered != ctx.buffer_bytes)
    return format_error(ctx.source, "data bytes [" + std::to_string(covered) + ", " + std::to_string(ctx.buffer_bytes) +
                                        ") (file bytes " + std::to_string(base + covered) + ".." +
                                        std::to_string(base + ctx.buffer_bytes) +
                                        ") at the end of the file belong to no tensor");
  return {};
}

result<json::value> parse_json(std::span<const std::byte> text, std::string_view source) {
  json::parser parser;
  boost::system::error_code ec;
  const std::size_t used = parser.write(reinterpret_cast<const char*>(text.data()), text.size(), ec);
  if (ec)
    return format_error(source, "header is not valid JSON: " + ec.message() + " near file offset " +
                                    std::to_string(8 + used) + " (header is " + std::to_string(text.size()) +
                                    " bytes)");
  return parser.release();
}

}  // namespace

const st_tensor* st_index::find(std::string_view name) const noexcept {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

result<std::uint64_t> st_tensor_bytes(std::string_view code, std::span<const std::uint64_t> shape) {
  const st_dtype* d = lookup_dtype(code);
  if (!d) return make_error(errc::format, "dtype " + quoted(code) + " is not a safetensors dtype");
  std::uint64_t bytes = 0;
  std::string problem;
  if (!tensor_bytes(*d, shape, bytes, problem))
    return make_error(errc::format, "shape " + shape_text(shape) + " of dtype " + quoted(code) + ": " + problem);
  return bytes;
}

result<st_dtype> find_st_dtype(std::string_view code) {
  if (const st_dtype* d = lookup_dtype(code)) return *d;
  return make_error(errc::format, "dtype " + quoted(code) + " is not a safetensors dtype");
}

result<std::uint64_t> st_header_length(std::span<const std::byte, 8> first8, std::uint64_t file_bytes,
                                       std::string_view source) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(first8[static_cast<std::size_t>(i)]);
  if (file_bytes < 8)
    return format_error(source, "file is " + std::to_string(file_bytes) +
                                    " bytes, shorter than its 8-byte header length");
  if (n == 0) return format_error(source, "header length at offset 0 is 0, expected a JSON object");
  if (n > st_header_max_bytes)
    return format_error(source, "header length at offset 0 is " + std::to_string(n) + " bytes, over the limit of " +
                                    std::to_string(st_header_max_bytes));
  if (n > file_bytes - 8)
    return format_error(source, "header length at offset 0 is " + std::to_string(n) +
                                    " bytes, past the end of the file (" + std::to_string(file_bytes - 8) +
                                    " bytes follow the length)");
  return n;
}

result<st_index> parse_safetensors_header(std::span<const std::byte> json_bytes, std::uint64_t file_bytes,
                                          std::string_view source) {
  const std::uint64_t header_bytes = json_bytes.size();
  if (header_bytes > st_header_max_bytes)
    return format_error(source, "header of " + std::to_string(header_bytes) + " bytes is over the limit of " +
                                    std::to_string(st_header_max_bytes));
  if (file_bytes < 8 || header_bytes > file_bytes - 8)
    return format_error(source, "header of " + std::to_string(header_bytes) + " bytes does not fit a file of " +
                                    std::to_string(file_bytes) + " bytes");
  TZ_TRY(root, parse_json(json_bytes, source));
  const auto* top = root.if_object();
  if (!top)
    return format_error(source, "header is a JSON " + std::string(json::to_string(root.kind())) +
                                    ", expected an object");
  const entry_context ctx{source, 8 + header_bytes, file_bytes - 8 - header_bytes};
  st_index index;
  index.header_bytes = header_bytes;
  index.tensors.reserve(top->size());
  for (const auto& kv : *top) {
    if (kv.key() == "__metadata__") {
      TZ_TRY(metadata, parse_metadata(kv.value(), source));
      index.metadata = std::move(metadata);
      continue;
    }
    TZ_TRY(tensor, parse_entry(kv.key(), kv.value(), ctx));
    index.tensors.push_back(std::move(tensor));
  }
  std::sort(index.tensors.begin(), index.tensors.end(), [](const st_tensor& a, const st_tensor& b) {
    if (a.data_begin != b.data_begin) return a.data_begin < b.data_begin;
    if (a.data_end != b.data_end) return a.data_end < b.data_end;
    return a.name < b.name;
  });
  TZ_CHECK(check_coverage(index.tensors, ctx));
  return index;
}

result<st_index> read_safetensors_index(const std::string& path) {
  const std::string source = "file " + path;
  TZ_TRY(fd, open_read_only(path));
  TZ_TRY(file_bytes, file_size(fd.get(), source));
  if (file_bytes < 8)
    return format_error(source, "file is " + std::to_string(file_bytes) +
                                    " bytes, shorter than its 8-byte header length");
  std::array<std::byte, 8> first8{};
  TZ_CHECK(pread_full(fd.get(), first8, 0, source));
  TZ_TRY(header_bytes, st_header_length(first8, file_bytes, source));
  std::vector<std::byte> header(header_bytes);  // bounded by st_header_length
  TZ_CHECK(pread_full(fd.get(), header, 8, source));
  return parse_safetensors_header(header, file_bytes, source);
}

result<dtype_info> st_dtype_to_tensorizer(std::string_view st_code) {
  const st_dtype* d = lookup_dtype(st_code);
  if (!d) return make_error(errc::format, "dtype " + quoted(st_code) + " is not a safetensors dtype");
  if (d->bits % 8 != 0)
    return make_error(errc::unsupported, "safetensors dtype " + quoted(st_code) + " packs " + std::to_string(d->bits) +
                                             "-bit elements; a .tensors file has no equivalent");
  return dtype_from_torch(d->torch);
}

result<std::string> tensorizer_dtype_to_st(const dtype_info& dtype) {
  for (const auto& d : st_dtypes) {
    if (d.bits % 8 == 0 && !d.torch.empty() && d.torch == dtype.torch && d.bits == 8 * dtype.itemsize)
      return std::string(d.code);
  }
  return make_error(errc::unsupported, "dtype " + dtype_display(dtype) + " (stored " + quoted(dtype.numpy) +
                                           ") has no safetensors equivalent");
}

}  // namespace tz::format

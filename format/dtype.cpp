// dtype strings: parsing the numpy / opaque forms and mapping torch dtype names onto them.
#include "tz/format/dtype.hpp"

#include <array>
#include <charconv>

namespace tz::format {
namespace {

struct torch_map_row {
  std::string_view torch;
  std::string_view numpy;  // numpy-native string, or the integer view for opaque ones
  bool opaque;
};

// torch dtypes and how tensorizer 2.11.1 stores them (format/FORMAT.md §7.1).
constexpr std::array<torch_map_row, 33> torch_rows{{
    {"torch.float16", "<f2", false},          {"torch.float32", "<f4", false},
    {"torch.float64", "<f8", false},          {"torch.int8", "|i1", false},
    {"torch.uint8", "|u1", false},            {"torch.int16", "<i2", false},
    {"torch.int32", "<i4", false},            {"torch.int64", "<i8", false},
    {"torch.bool", "|b1", false},             {"torch.complex64", "<c8", false},
    {"torch.complex128", "<c16", false},      {"torch.uint16", "<u2", false},
    {"torch.uint32", "<u4", false},           {"torch.uint64", "<u8", false},
    {"torch.bfloat16", "<V2", true},          {"torch.complex32", "<V4", true},
    {"torch.float8_e4m3fn", "|V1", true},     {"torch.float8_e5m2", "|V1", true},
    {"torch.float8_e4m3fnuz", "|V1", true},   {"torch.float8_e5m2fnuz", "|V1", true},
    {"torch.float8_e8m0fnu", "|V1", true},    {"torch.bits8", "|V1", true},
    {"torch.bits16", "<V2", true},            {"torch.bits1x8", "|V1", true},
    {"torch.bits2x4", "|V1", true},           {"torch.bits4x2", "|V1", true},
    {"torch.float4_e2m1fn_x2", "|V1", true},  {"torch.uint1", "|V1", true},
    {"torch.uint2", "|V1", true},             {"torch.uint3", "|V1", true},
    {"torch.uint4", "|V1", true},             {"torch.int4", "|V1", true},
    {"torch.int2", "|V1", true},
}};

std::string torch_for_numpy(std::string_view numpy) {
  for (const auto& row : torch_rows)
    if (!row.opaque && row.numpy == numpy) return std::string(row.torch);
  return {};
}

error bad(std::string_view stored, std::string_view why) {
  std::string shown;
  for (char c : stored) shown += (c == '\0') ? std::string("\\0") : std::string(1, c);
  return make_error(errc::format, "invalid dtype string \"" + shown + "\": " + std::string(why));
}

}  // namespace

result<dtype_info> parse_dtype(std::string_view stored) {
  dtype_info d;
  d.stored = std::string(stored);
  const auto nul = stored.find('\0');
  std::string_view numpy = stored.substr(0, nul);
  if (nul != std::string_view::npos) {
    d.torch = std::string(stored.substr(nul + 1));
    if (d.torch.find('\0') != std::string::npos) return bad(stored, "more than one NUL separator");
    d.opaque = true;
  }
  if (numpy.size() < 3) return bad(stored, "too short");
  const char order = numpy[0];
  const char kind = numpy[1];
  if (order == '>') return bad(stored, "big-endian data is not supported");
  if (order != '<' && order != '|' && order != '=') return bad(stored, "unknown byte-order character");
  unsigned size = 0;
  const auto digits = numpy.substr(2);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), size);
  if (ec != std::errc{} || end != digits.data() + digits.size() || size == 0 || size > 16)
    return bad(stored, "bad item size");
  static constexpr std::string_view kinds = "biufcV";
  if (kinds.find(kind) == std::string_view::npos) return bad(stored, "unsupported kind");
  d.numpy = std::string(numpy);
  d.itemsize = size;
  if (kind == 'V') {
    if (!d.opaque) return bad(stored, "void dtype without a torch dtype");
    if (d.torch.rfind("torch.", 0) != 0 || d.torch.size() <= 6)
      return bad(stored, "opaque torch part must be torch.<name>");
    if (size != 1 && size != 2 && size != 4 && size != 8) return bad(stored, "opaque item size must be 1, 2, 4 or 8");
  } else {
    // A non-void numpy part followed by a torch part is used as numpy (format/FORMAT.md §7.1).
    d.opaque = false;
    d.torch = torch_for_numpy(std::string(1, order == '=' ? '<' : order) + std::string(numpy.substr(1)));
  }
  return d;
}

result<dtype_info> dtype_from_torch(std::string_view torch_name) {
  std::string name(torch_name);
  if (name.rfind("torch.", 0) != 0) name = "torch." + name;
  for (const auto& row : torch_rows) {
    if (row.torch != name) continue;
    std::string stored(row.numpy);
    if (row.opaque) stored += std::string(1, '\0') + name;
    return parse_dtype(stored);
  }
  return make_error(errc::unsupported, "dtype " + name + " cannot be stored in a .tensors file");
}

std::string dtype_display(const dtype_info& d) {
  if (d.torch.rfind("torch.", 0) == 0) return d.torch.substr(6);
  return d.numpy;
}

}  // namespace tz::format

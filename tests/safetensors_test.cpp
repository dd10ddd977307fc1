// safetensors reader/writer: dtype mapping, round trips, layout, atomic writes, malformed headers.
// The files exchanged with the python safetensors library (suite "python") are in
// safetensors_python_test.cpp, linked into the same executable.
#include "tz/format/safetensors.hpp"

#include "safetensors_helpers.hpp"
#include "temp_dir.hpp"

#include <doctest/doctest.h>

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

namespace fs = std::filesystem;
using namespace tz::format;
using namespace std::string_literals;

namespace {

using namespace st_test;
using tz_test::temp_dir;

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// An 8-byte little-endian length, `json`, then `data_bytes` bytes of data.
std::vector<std::byte> make_file(const std::string& json, std::size_t data_bytes, std::uint64_t length) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((length >> (8 * i)) & 0xFF);
  out += json + std::string(data_bytes, '\x5a');
  const auto* p = reinterpret_cast<const std::byte*>(out.data());
  return {p, p + out.size()};
}
std::vector<std::byte> make_file(const std::string& json, std::size_t data_bytes) {
  return make_file(json, data_bytes, json.size());
}

// Parses a whole file held in memory, as a byte-source reader would: length, then header.
tz::result<st_index> parse_bytes(std::span<const std::byte> file) {
  std::array<std::byte, 8> first8{};  // zero-padded when the file is shorter than 8 bytes
  std::copy_n(file.begin(), std::min<std::size_t>(8, file.size()), first8.begin());
  auto n = st_header_length(first8, file.size(), "mem");
  if (!n) return n.error();
  return parse_safetensors_header(file.subspan(8, *n), file.size(), "mem");
}

void check_format_error(const std::vector<std::byte>& file, const std::vector<std::string>& needles) {
  auto r = parse_bytes(file);
  REQUIRE_FALSE(r.has_value());
  INFO("message: " << r.error().message);
  CHECK(r.error().code == tz::errc::format);
  CHECK(r.error().message.rfind("mem: safetensors ", 0) == 0);
  for (const auto& needle : needles) CHECK_MESSAGE(r.error().message.find(needle) != std::string::npos, needle);
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, std::uint64_t begin,
                  std::uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

}  // namespace

TEST_CASE("every byte-sized safetensors dtype maps to a .tensors dtype of the same size and back") {
  for (const auto& code : all_codes) {
    INFO("code " << code);
    const auto d = find_st_dtype(code);
    REQUIRE(d.has_value());
    if (d->bits % 8 != 0) {
      CHECK(st_dtype_to_tensorizer(code).error().code == tz::errc::unsupported);
      continue;
    }
    const auto info = st_dtype_to_tensorizer(code);
    REQUIRE(info.has_value());
    CHECK(info->itemsize * 8 == d->bits);
    CHECK(tensorizer_dtype_to_st(*info).value() == code);
  }
  CHECK(st_dtype_to_tensorizer("BF16")->stored == "<V2\0torch.bfloat16"s);
  CHECK(st_dtype_to_tensorizer("F8_E4M3")->stored == "|V1\0torch.float8_e4m3fn"s);
  CHECK(st_dtype_to_tensorizer("F8_E8M0")->stored == "|V1\0torch.float8_e8m0fnu"s);
  CHECK(st_dtype_to_tensorizer("BOOL")->stored == "|b1");
  CHECK(st_dtype_to_tensorizer("C64")->stored == "<c8");
  CHECK(st_dtype_to_tensorizer("U16")->stored == "<u2");
  CHECK(st_dtype_to_tensorizer("f32").error().code == tz::errc::format);
}

TEST_CASE("tensor sizes count bits, so packed sub-byte dtypes must fill whole bytes") {
  using shape = std::vector<std::uint64_t>;
  CHECK(st_tensor_bytes("F32", shape{}).value() == 4);
  CHECK(st_tensor_bytes("U8", shape{0, 5}).value() == 0);
  CHECK(st_tensor_bytes("C64", shape{2, 3}).value() == 48);
  CHECK(st_tensor_bytes("F4", shape{3, 8}).value() == 12);
  CHECK(st_tensor_bytes("F6_E2M3", shape{4}).value() == 3);
  CHECK(st_tensor_bytes("F4", shape{3}).error().message.find("do not fill whole bytes") != std::string::npos);
  CHECK(st_tensor_bytes("U64", shape{1ull << 61}).error().message.find("overflow") != std::string::npos);
  CHECK(st_tensor_bytes("U8", shape{1ull << 32, 1ull << 32}).error().code == tz::errc::format);
  CHECK(st_tensor_bytes("X", shape{}).error().code == tz::errc::format);
}

TEST_CASE("tensorizer dtypes that safetensors cannot store are refused by name") {
  for (const char* torch : {"complex32", "complex128", "float4_e2m1fn_x2", "bits8"}) {
    const auto r = tensorizer_dtype_to_st(dtype_from_torch(torch).value());
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == tz::errc::unsupported);
    CHECK(r.error().message.find(torch) != std::string::npos);
  }
  CHECK(tensorizer_dtype_to_st(parse_dtype("=f4").value()).value() == "F32");
}

TEST_CASE("a written file round-trips every dtype, including 0-d and zero-size tensors") {
  std::mt19937_64 rng(7);
  auto set = every_dtype(rng);
  const auto tensors = set.finish();
  const st_metadata metadata = {{"format", "pt"}, {"b", "é\n\"x\""}};
  temp_dir dir;
  const auto path = (dir.path / "all.safetensors").string();
  REQUIRE(write_safetensors(path, tensors, metadata).has_value());
  CHECK(dir.entries() == std::vector<std::string>{"all.safetensors"});
  const auto index = read_safetensors_index(path);
  REQUIRE(index.has_value());
  const auto file = tz_test::read_file(path);
  CHECK(index->data_offset_bytes() % 8 == 0);
  CHECK(index->metadata == metadata);
  CHECK(plan_safetensors(tensors, metadata)->file_bytes == file.size());
  check_matches(*index, tensors, file);
}

TEST_CASE("the header is laid out as python's save_file lays it out") {
  tensor_set set;
  set.add("zb", "F32", {5}, std::vector<std::byte>(20));
  set.add("a", "I8", {3}, std::vector<std::byte>(3));
  set.add("s", "F64", {}, std::vector<std::byte>(8));
  set.add("e", "F32", {0, 4}, {});
  const auto layout = plan_safetensors(set.finish(), {{"format", "pt"}});
  REQUIRE(layout.has_value());
  std::string json =
      R"({"__metadata__":{"format":"pt"},"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
      R"("e":{"dtype":"F32","shape":[0,4],"data_offsets":[8,8]},)"
      R"("zb":{"dtype":"F32","shape":[5],"data_offsets":[8,28]},)"
      R"("a":{"dtype":"I8","shape":[3],"data_offsets":[28,31]}})";
  json.append((8 - json.size() % 8) % 8, ' ');
  CHECK(layout->header == text_of(make_file(json, 0)));
  CHECK(layout->order == std::vector<std::size_t>{2, 3, 0, 1});
  CHECK(layout->file_bytes == 8 + json.size() + 31);

  tensor_set odd;  // serde_json's escaping: short forms, \u00xx for other controls, the rest verbatim
  odd.add("x\n\u2028\x01\x7f/\\\"\xc3\xa9", "F32", {1}, std::vector<std::byte>(4));
  const auto escaped = plan_safetensors(odd.finish(), {});
  REQUIRE(escaped.has_value());
  CHECK(escaped->header.substr(8).rfind("{\"x\\n\u2028\\u0001\x7f/\\\\\\\"\xc3\xa9\":{", 0) == 0);
}

TEST_CASE("the writer refuses bad tensors and leaves the destination untouched") {
  temp_dir dir;
  const auto path = (dir.path / "out.safetensors").string();
  write_text(path, "old");
  const std::vector<std::byte> four(4);
  const std::vector<std::pair<std::vector<st_write_tensor>, std::string>> cases = {
      {{{"w", "F32", {1}, four}, {"w", "I32", {1}, four}}, "\"w\" is given twice"},
      {{{"__metadata__", "F32", {1}, four}}, "reserved"},
      {{{"w", "F33", {1}, four}}, "F33"},
      {{{"w", "F32", {2}, four}}, "holds 4 data bytes, expected 8"},
      {{{"w", "F4", {3}, std::span(four).first(1)}}, "\"w\""},
      {{{"w", "F32", {1ull << 62, 8}, four}}, "overflow"},
      {{{"bad\xff", "F32", {1}, four}}, "UTF-8"},
  };
  for (const auto& [tensors, needle] : cases) {
    const auto r = write_safetensors(path, tensors);
    REQUIRE_FALSE(r.has_value());
    INFO(r.error().message);
    CHECK(r.error().code == tz::errc::invalid_argument);
    CHECK(r.error().message.find(needle) != std::string::npos);
  }
  const std::vector<st_write_tensor> good = {{"w", "F32", {1}, four}};
  CHECK(write_safetensors(path, good, {{"k", "1"}, {"k", "2"}}).error().message.find("twice") != std::string::npos);
  CHECK(text_of(tz_test::read_file(path)) == "old");
  CHECK(dir.entries() == std::vector<std::string>{"out.safetensors"});
}

TEST_CASE("a failed write removes its temporary file and keeps the old file") {
  temp_dir dir;
  const std::vector<std::byte> big(1 << 20);
  const std::vector<st_write_tensor> tensors = {{"w", "U8", {big.size()}, big}};
  SUBCASE("renaming onto a directory fails") {
    fs::create_directory(dir.path / "taken");
    const auto r = write_safetensors((dir.path / "taken").string(), tensors);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == tz::errc::io);
    CHECK(r.error().message.find("rename") != std::string::npos);
    CHECK(dir.entries() == std::vector<std::string>{"taken"});
  }
  SUBCASE("a write beyond the file size limit fails") {
    const auto path = dir.path / "out.safetensors";
    write_text(path, "old");
    rlimit saved{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = saved;
    small.rlim_cur = 64 * 1024;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    const auto r = write_safetensors(path.string(), tensors);
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, old_handler);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == tz::errc::io);
    CHECK(text_of(tz_test::read_file(path)) == "old");
    CHECK(dir.entries() == std::vector<std::string>{"out.safetensors"});
  }
  SUBCASE("a missing directory fails before anything is written") {
    const auto r = write_safetensors((dir.path / "no" / "out.safetensors").string(), tensors);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == tz::errc::not_found);
    CHECK(r.error().message.find("no/out.safetensors") != std::string::npos);
    CHECK(dir.entries().empty());
  }
}

TEST_CASE("malformed files are refused with errc::format naming the tensor and offsets") {
  const std::string w = entry("w", "F32", "[2]", 0, 8);
  check_format_error(make_file("{}", 0, 1000), {"header length at offset 0 is 1000", "past the end"});
  check_format_error(make_file("{}", 0, 1ull << 40), {"1099511627776", "over the limit"});
  check_format_error(make_file("{}", 0, ~0ull), {"over the limit"});
  check_format_error(make_file("", 0, 0), {"is 0"});
  check_format_error(std::vector<std::byte>(5), {"5 bytes, shorter"});
  check_format_error(make_file("{\"w\":", 0), {"not valid JSON", "near file offset"});
  check_format_error(make_file("{\"a\":1}\0\0\0"s, 0), {"not valid JSON"});
  check_format_error(make_file("[1,2]", 0), {"header is a JSON array, expected an object"});
  check_format_error(make_file("{\"w\xff\":{}}", 0), {"not valid JSON"});
  check_format_error(make_file("{\"w\":5}", 0), {"tensor \"w\" is a JSON int64"});
  check_format_error(make_file("{" + entry("w", "F33", "[2]", 0, 8) + "}", 8), {"tensor \"w\"", "\"F33\""});
  check_format_error(make_file("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4), {"\"w\"", "\"dtype\" is missing"});
  check_format_error(make_file("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,4]}}", 4), {"\"shape\" is missing"});
  check_format_error(make_file("{" + entry("w", "F32", "[-2]", 0, 8) + "}", 8), {"\"w\"", "\"shape\"[0] is -2"});
  check_format_error(make_file("{" + entry("w", "F32", "[2.0]", 0, 8) + "}", 8), {"\"shape\"[0] is 2E0"});
  check_format_error(make_file("{" + entry("w", "F32", "2", 0, 8) + "}", 8), {"\"shape\" is 2"});
  check_format_error(make_file("{" + entry("w", "U8", "[4294967296,4294967297]", 0, 8) + "}", 8),
                     {"\"w\"", "element count overflows"});
  check_format_error(make_file("{" + entry("w", "F32", "[4611686018427387904]", 0, 8) + "}", 8),
                     {"\"w\"", "overflow 64 bits"});
  check_format_error(make_file("{" + entry("w", "F4", "[3]", 0, 2) + "}", 2), {"\"w\"", "do not fill whole bytes"});
  check_format_error(make_file("{" + entry("w", "F32", "[4]", 0, 16) + "}", 8),
                     {"\"w\"", "data_offsets [0, 16]", "past the end of the data buffer (8 bytes"});
  check_format_error(make_file("{" + entry("w", "F32", "[3]", 0, 8) + "}", 8),
                     {"\"w\"", "[0, 8]", "span 8 bytes, expected 12", "shape [3] of dtype F32"});
  check_format_error(make_file("{" + entry("w", "F32", "[2]", 8, 0) + "}", 8), {"\"w\"", "ends before it begins"});
  check_format_error(make_file("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1),
                     {"\"w\"", "3 entries, expected 2"});
  check_format_error(make_file("{" + w + "," + entry("v", "F32", "[1]", 4, 8) + "}", 8),
                     {"tensor \"v\"", "[4, 8]", "overlaps tensor \"w\"", "[0, 8]"});
  check_format_error(make_file("{" + entry("w", "F32", "[2]", 4, 12) + "}", 12),
                     {"data bytes [0, 4)", "belong to no tensor", "hole before tensor \"w\""});
  check_format_error(make_file("{" + w + "}", 12), {"data bytes [8, 12)", "end of the file"});
  check_format_error(make_file("{\"__metadata__\":{\"k\":1}}", 0), {"\"__metadata__\" value of key \"k\" is 1"});
  check_format_error(make_file("{\"__metadata__\":[]}", 0), {"expected an object of strings"});
}

TEST_CASE("what python's reader accepts is accepted") {
  const std::string w = entry("w", "F32", "[2]", 0, 8);
  auto r = parse_bytes(make_file(" \n{" + w + "}\t      ", 8));  // whitespace around, padding
  REQUIRE(r.has_value());
  CHECK(r->tensors.at(0).data_begin == 8 + r->header_bytes);
  CHECK(parse_bytes(make_file("{}", 0)).value().tensors.empty());
  r = parse_bytes(make_file("{\"__metadata__\":null," + w + "}", 8));
  REQUIRE(r.has_value());
  CHECK(r->metadata.empty());
  r = parse_bytes(make_file("{\"__metadata__\":{\"z\":\"1\",\"a\":\"2\"}," + w + "}", 8));
  REQUIRE(r.has_value());
  CHECK(r->metadata == st_metadata{{"z", "1"}, {"a", "2"}});
  const std::string extra = R"({"w":{"extra":[1],"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  CHECK(parse_bytes(make_file(extra, 8)).has_value());  // unknown fields are ignored
  // Zero-size tensors may sit at any boundary; ties are ordered by name.
  r = parse_bytes(make_file("{" + entry("z", "U8", "[0]", 8, 8) + "," + entry("b", "U8", "[0]", 0, 0) + "," + w + "," +
                            entry("a", "U8", "[0]", 0, 0) + "}", 8));
  REQUIRE(r.has_value());
  REQUIRE(r->tensors.size() == 4);
  CHECK(r->tensors[0].name == "a");
  CHECK(r->tensors[1].name == "b");
  CHECK(r->tensors[2].name == "w");
  CHECK(r->tensors[3].name == "z");
  // A repeated key keeps its last value, as serde_json's map does in python.
  r = parse_bytes(make_file("{" + entry("w", "F32", "[1]", 0, 4) + "," + w + "}", 8));
  REQUIRE(r.has_value());
  CHECK(r->tensors.at(0).shape == std::vector<std::uint64_t>{2});
}

TEST_CASE("random corruption of a valid file never crashes the parser") {
  std::mt19937_64 rng(11);
  auto set = every_dtype(rng);
  const auto layout = plan_safetensors(set.finish(), {{"format", "pt"}});
  REQUIRE(layout.has_value());
  std::vector<std::byte> file = make_file(layout->header.substr(8), layout->file_bytes - layout->header.size(),
                                          layout->header.size() - 8);
  REQUIRE(parse_bytes(file).has_value());
  int accepted = 0;
  for (int round = 0; round < 3000; ++round) {
    auto copy = file;
    const std::size_t span = round % 3 == 0 ? 8 : layout->header.size();
    for (std::uint64_t k = 0, flips = 1 + rng() % 4; k < flips; ++k)
      copy[rng() % span] = static_cast<std::byte>(rng() % 256);
    if (round % 5 == 0) copy.resize(rng() % copy.size());
    const auto r = parse_bytes(copy);
    if (!r) {
      CHECK(r.error().code == tz::errc::format);
      continue;
    }
    ++accepted;
    std::uint64_t covered = r->data_offset_bytes();
    for (const auto& t : r->tensors) {
      CHECK(t.data_begin == covered);
      covered = t.data_end;
    }
    CHECK(covered == copy.size());
  }
  MESSAGE(accepted << " of 3000 corrupted files were still valid");
}

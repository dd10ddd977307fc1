// format/ tests: malformed files give clear errors with offsets; the writer's version and safety rules.
#include "format_test_util.hpp"
#include "file_reader.hpp"
#include "tz/format/writer.hpp"

#include <doctest/doctest.h>

using namespace tz;
using namespace tz::format;

namespace {

using tz_test::open_error;
using tz_test::put64;
using tz_test::says;

// Byte positions of metadata entry 0's fields in a v1-v4 file.
struct entry0 {
  std::size_t type, dtype_len, ndim, shape, header_offset, data_offset, data_length;
};
entry0 locate_entry0(const std::vector<std::byte>& b) {
  entry0 e{};
  std::size_t p = 73;
  const auto name_len = std::to_integer<std::size_t>(b[p]) | std::to_integer<std::size_t>(b[p + 1]) << 8;
  p += 2 + name_len;
  e.type = p++;
  e.dtype_len = p;
  p += 1 + std::to_integer<std::size_t>(b[p]);
  e.ndim = p;
  p += 1 + 4 * std::to_integer<std::size_t>(b[p]);
  e.shape = e.ndim + 1;
  e.header_offset = p, e.data_offset = p + 8, e.data_length = p + 16;
  return e;
}

std::vector<std::byte> reference() { return tz_test::read_file(tz_test::vectors_dir() / "small_mixed.tensors"); }

}  // namespace

TEST_CASE("malformed file headers are rejected with the offset of the bad field" * doctest::test_suite("reference")) {
  auto b = reference();
  auto bad_magic = b;
  bad_magic[1] = std::byte{'X'};
  CHECK(says(open_error(bad_magic), "bad magic at offset 0"));
  CHECK(says(open_error({}), "got end of file"));
  auto v6 = b;
  v6[5] = std::byte{6};
  CHECK(says(open_error(v6), "unsupported data version 6"));
  auto v0 = b;
  v0[5] = std::byte{0};
  CHECK(says(open_error(v0), "offset 5"));
  auto flags = b;
  flags[9] = std::byte{4};
  CHECK(says(open_error(flags), "field feature_flags at offset 9: unsupported feature flags 4"));
  auto tagged_v2 = b;  // bit 1 (versioned_headers) comes only with data version 5
  tagged_v2[9] = std::byte{2};
  CHECK(says(open_error(tagged_v2), "offset 9: feature flag versioned_headers (2) needs data version 5, the file has version 2"));
  auto high_flag = b;
  high_flag[40] = std::byte{1};
  CHECK(says(open_error(high_flag), "unknown feature flag"));
  CHECK(says(open_error(std::vector<std::byte>(b.begin(), b.begin() + 50)), "truncated"));
  auto huge_meta = b;
  put64(huge_meta, 65, 1ull << 40);
  CHECK(says(open_error(huge_meta), "runs past the end of the file"));
  auto many = b;
  put64(many, 57, 1ull << 40);
  CHECK(says(open_error(many), "cannot fit"));
  auto none = b;
  put64(none, 57, 0);
  CHECK(says(open_error(none), "empty"));
}

TEST_CASE("malformed metadata entries and tensor headers are rejected" * doctest::test_suite("reference")) {
  const auto b = reference();
  const auto e = locate_entry0(b);
  auto past_eof = b;
  put64(past_eof, e.data_offset, b.size() - 2);
  CHECK(says(open_error(past_eof), "runs past the end of the file"));
  auto truncated = std::vector<std::byte>(b.begin(), b.end() - 100);
  CHECK(says(open_error(truncated), "runs past the end of the file"));
  auto type = b;
  type[e.type] = std::byte{7};
  CHECK(says(open_error(type), "unknown tensor type 7"));
  auto overflow = b;
  overflow[e.shape] = overflow[e.shape + 1] = overflow[e.shape + 2] = overflow[e.shape + 3] = std::byte{0xff};
  auto overflow_error = open_error(overflow);
  CHECK((says(overflow_error, "expected") || says(overflow_error, "overflow")));
  auto header_size = b;
  std::uint64_t header_offset = 0;
  for (int i = 0; i < 8; ++i) header_offset |= std::to_integer<std::uint64_t>(b[e.header_offset + i]) << (8 * i);
  header_size[header_offset] = std::byte{0x01};
  CHECK(says(open_error(header_size), "header_size"));
  auto header_dtype = b;  // change the dtype in the tensor header only ("<f4" -> "<i4")
  const auto name_len = std::to_integer<std::size_t>(b[header_offset + 11]);
  header_dtype[header_offset + 15 + name_len] = std::byte{'i'};
  CHECK(says(open_error(header_dtype), "disagrees with the metadata"));
  auto overlap = b;
  put64(overlap, e.header_offset, 100);
  CHECK(says(open_error(overlap), "overlaps"));
}

TEST_CASE("the writer raises the version for opaque and meta tensors") {
  tz_test::temp_dir tmp;
  std::vector<std::byte> data(8);
  auto f4 = *parse_dtype("<f4");
  auto bf = *dtype_from_torch("bfloat16");
  auto w = tensor_writer::create((tmp.path / "a.tensors").string());
  REQUIRE(w);
  REQUIRE(w->write({plain_path("a"), tensor_type::state_dict, 0, f4, {2}, data, false}));
  CHECK(w->version() == 1);
  REQUIRE(w->write({plain_path("b"), tensor_type::state_dict, 0, bf, {4}, data, false}));
  CHECK(w->version() == 2);
  REQUIRE(w->write({plain_path("c"), tensor_type::state_dict, 0, f4, {1024}, {}, true}));
  CHECK(w->version() == 4);
  REQUIRE(w->close());
  auto r = file_reader::open((tmp.path / "a.tensors").string());
  REQUIRE(r);
  CHECK(r->index().header.version == 4);
  CHECK(r->index().tensors[2].is_meta());
}

TEST_CASE("the writer refuses conflicting paths, wrong sizes and metadata overflow") {
  tz_test::temp_dir tmp;
  std::vector<std::byte> data(4);
  auto f4 = *parse_dtype("<f4");
  auto w = tensor_writer::create((tmp.path / "a.tensors").string());
  REQUIRE(w);
  REQUIRE(w->write({plain_path("a"), tensor_type::state_dict, 0, f4, {1}, data, false}));
  CHECK_FALSE(w->write({plain_path("a"), tensor_type::state_dict, 0, f4, {1}, data, false}));
  CHECK_FALSE(w->write({plain_path("b"), tensor_type::state_dict, 0, f4, {2}, data, false}));
  const std::string long_name(60000, 'x');
  bool overflowed = false;
  for (int i = 0; i < 10 && !overflowed; ++i) {
    auto r = w->write({plain_path(long_name + std::to_string(i)), tensor_type::state_dict, 0, f4, {1}, data, false});
    if (!r) overflowed = r.error().message.find("metadata overflow") != std::string::npos;
  }
  CHECK(overflowed);
}

TEST_CASE("an unclosed writer leaves the destination untouched") {
  tz_test::temp_dir tmp;
  const auto path = tmp.path / "keep.tensors";
  tz_test::write_file(path, {std::byte{1}, std::byte{2}});
  {
    auto w = tensor_writer::create(path.string());
    REQUIRE(w);
    std::vector<std::byte> data(4);
    REQUIRE(w->write({plain_path("a"), tensor_type::state_dict, 0, *parse_dtype("<f4"), {1}, data, false}));
  }
  CHECK(tz_test::read_file(path) == std::vector<std::byte>{std::byte{1}, std::byte{2}});
  CHECK(std::distance(std::filesystem::directory_iterator(tmp.path), std::filesystem::directory_iterator()) == 1);
}

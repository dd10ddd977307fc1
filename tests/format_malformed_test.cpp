// format/ tests: malformed files give clear errors with offsets; the writer's version and safety rules.
#include "format_test_util.hpp"
#include "file_reader.hpp"
#include "tz/format/writer.hpp"

#include <doctest/doctest.h>

using namespace tz;
using namespace tz::format;

namespace {

void put64(std::vector<std::byte>& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<std::byte>(v >> (8 * i));
}

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

// Writes the mutated bytes and opens them, returning the error (the test fails if it opens).
error open_error(const std::vector<std::byte>& bytes) {
  tz_test::temp_dir tmp;
  tz_test::write_file(tmp.path / "m.tensors", bytes);
  auto r = file_reader::open((tmp.path / "m.tensors").string());
  if (r) {
    for (std::size_t i = 0; i < r->index().tensors.size(); ++i) {
      auto h = r->read_header(i);
      if (!h) return h.error();
    }
    FAIL("a malformed file was accepted");
  }
  return r.error();
}

std::vector<std::byte> reference() { return tz_test::read_file(tz_test::vectors_dir() / "small_mixed.tensors"); }

bool says(const error& e, const std::string& what) {
  const bool found = e.message.find(what) != std::string::npos;
  if (!found) MESSAGE("expected '" << what << "' in: " << e.message);
  return found;
}

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
  flags[9] = std::byte{2};
  CHECK(says(open_error(flags), "feature flags"));
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

// Rewrites a v1-v4 file as data version 5 with every metadata entry tagged 1 (u32 dimensions):
// the layout tensorizer 2.12 writes for files whose other tensors need u64 dimensions.
std::vector<std::byte> as_version5(std::vector<std::byte> b, std::uint32_t first_tag) {
  auto r = file_reader::open(read_at_fn([&b](std::uint64_t off, std::span<std::byte> dst) -> result<void> {
                               std::memcpy(dst.data(), b.data() + off, dst.size());
                               return {};
                             }),
                             b.size(), "v1");
  REQUIRE(r);
  std::vector<std::byte> meta;
  std::size_t p = 73;
  for (std::size_t i = 0; i < r->index().tensors.size(); ++i) {
    const auto& e = r->index().tensors[i];
    const std::size_t entry = 29 + e.name.size() + e.dtype.stored.size() + 4 * e.shape.size();
    const std::uint32_t tag = i == 0 ? first_tag : 1;
    for (int k = 0; k < 4; ++k) meta.push_back(static_cast<std::byte>(tag >> (8 * k)));
    meta.insert(meta.end(), b.begin() + static_cast<std::ptrdiff_t>(p), b.begin() + static_cast<std::ptrdiff_t>(p + entry));
    p += entry;
  }
  std::fill(b.begin() + 73, b.begin() + 73 + 262144, std::byte{0});
  std::copy(meta.begin(), meta.end(), b.begin() + 73);
  b[5] = std::byte{5};
  return b;
}

TEST_CASE("data version 5 files with tagged metadata entries are read" * doctest::test_suite("reference")) {
  tz_test::temp_dir tmp;
  const auto v5 = as_version5(reference(), 1);
  tz_test::write_file(tmp.path / "v5.tensors", v5);
  auto r = file_reader::open((tmp.path / "v5.tensors").string());
  REQUIRE(r);
  auto ref = file_reader::open((tz_test::vectors_dir() / "small_mixed.tensors").string());
  REQUIRE(ref);
  CHECK(r->index().header.version == 5);
  REQUIRE(r->index().tensors.size() == ref->index().tensors.size());
  for (std::size_t i = 0; i < r->index().tensors.size(); ++i) {
    const auto& e = r->index().tensors[i];
    CHECK(e.name == ref->index().tensors[i].name);
    CHECK(e.shape == ref->index().tensors[i].shape);
    CHECK(e.metadata_version == 1);
    auto h = r->read_header(i);
    REQUIRE(h);
    std::vector<std::byte> data(e.data_length);
    REQUIRE(r->read_data(i, data));
    CHECK(verify_tensor(*h, data, r->index().source));
  }
  CHECK(says(open_error(as_version5(reference(), 7)), "unknown entry version 7"));
}

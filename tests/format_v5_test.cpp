// format/ tests: data version 5 (dimensions >= 2^32, tensorizer 2.12): our writer's layout, tagged
// metadata, the flag rules, and malformed v5 input.
#include "format_test_util.hpp"
#include "file_reader.hpp"
#include "tz/format/encryption.hpp"
#include "tz/format/writer.hpp"

#include <doctest/doctest.h>

using namespace tz;
using namespace tz::format;

namespace {

using tz_test::open_error;
using tz_test::says;

constexpr std::uint64_t long_dim = 1ull << 32;

std::uint64_t get_le(const std::vector<std::byte>& b, std::size_t at, std::size_t width) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < width; ++i) v |= std::to_integer<std::uint64_t>(b[at + i]) << (8 * i);
  return v;
}

// A mixed file: short tensors around a zero-size long one and a 4 GiB meta one (no data stored).
std::vector<std::byte> write_mixed(const std::filesystem::path& path, tensor_encryptor* encryptor = nullptr) {
  std::vector<std::byte> a(8, std::byte{1}), e(6, std::byte{2});
  auto w = tensor_writer::create(path.string(), {encryptor});
  REQUIRE(w);
  REQUIRE(w->write({plain_path("a"), tensor_type::state_dict, 0, *parse_dtype("<f4"), {2}, a, false}));
  REQUIRE(w->write({plain_path("b"), tensor_type::state_dict, 0, *dtype_from_torch("bfloat16"), {4}, a, false}));
  CHECK(w->version() == (encryptor ? 3u : 2u));
  REQUIRE(w->write({plain_path("c"), tensor_type::state_dict, 0, *parse_dtype("<f4"), {0, long_dim}, {}, false}));
  CHECK(w->version() == 5);
  REQUIRE(w->write({plain_path("d"), tensor_type::state_dict, 0, *parse_dtype("|u1"), {long_dim}, {}, true}));
  REQUIRE(w->write({plain_path("e"), tensor_type::state_dict, 0, *parse_dtype("<i2"), {3}, e, false}));
  REQUIRE(w->close());
  CHECK(w->version() == 5);
  return tz_test::read_file(path);
}


// Rewrites a v1-v4 file as data version 5 with flag bit 1 and every metadata entry tagged
// (`first_tag` for the first, 1 for the rest): how tensorizer 2.12 stores the short tensors of a
// file that also holds long ones.
std::vector<std::byte> as_version5(std::vector<std::byte> b, std::uint32_t first_tag) {
  auto r = file_reader::open(read_at_fn([&b](std::uint64_t off, std::span<std::byte> dst) -> result<void> {
                               std::memcpy(dst.data(), b.data() + off, dst.size());
                               return {};
                             }),
                             b.size(), "v1");
  REQUIRE(r);
  std::vector<std::byte> meta;
  for (std::size_t i = 0; i < r->index().tensors.size(); ++i) {
    append_index_entry(meta, r->index().tensors[i], true);
    if (i == 0)
      for (std::size_t k = 0; k < 4; ++k) meta[k] = static_cast<std::byte>(first_tag >> (8 * k));
  }
  std::fill(b.begin() + 73, b.begin() + 73 + 262144, std::byte{0});
  std::copy(meta.begin(), meta.end(), b.begin() + 73);
  b[5] = std::byte{5};
  b[9] |= std::byte{2};
  return b;
}

}  // namespace

TEST_CASE("a dimension >= 2^32 gives version 5, flag bit 1, every entry tagged and u64 dimensions for that tensor") {
  tz_test::temp_dir tmp;
  const auto bytes = write_mixed(tmp.path / "v5.tensors");
  CHECK(get_le(bytes, 5, 4) == 5);
  CHECK(get_le(bytes, 9, 8) == flag_versioned_headers);
  CHECK(get_le(bytes, 73, 4) == 1);  // the first entry, written before any long one, is tagged too
  auto r = file_reader::open((tmp.path / "v5.tensors").string());
  REQUIRE(r);
  const auto& index = r->index();
  CHECK(index.header.has_tagged_metadata());
  REQUIRE(index.tensors.size() == 5);
  const std::uint32_t tags[] = {1, 1, 5, 5, 1};
  for (std::size_t i = 0; i < 5; ++i) {
    CAPTURE(i);
    CHECK(index.tensors[i].metadata_version == tags[i]);
    auto h = r->read_header(i);
    REQUIRE(h);
    std::vector<std::byte> data(index.tensors[i].data_length);
    REQUIRE(r->read_data(i, data));
    CHECK(verify_tensor(*h, data, index.source));
  }
  const auto& c = index.tensors[2];
  CHECK(c.shape == std::vector<std::uint64_t>{0, long_dim});
  CHECK(c.header_bytes() == 66 + 1 + 3 + 2 * 8);
  const std::size_t ndim_at = c.header_offset + 8 + 2 + 1 + 2 + 1 + 1 + 3;
  CHECK(get_le(bytes, ndim_at, 1) == 2);
  CHECK(get_le(bytes, ndim_at + 1 + 8, 8) == long_dim);
  CHECK(index.tensors[3].is_meta());
  CHECK(index.tensors[3].deserialized_bytes == long_dim);
  CHECK(index.tensors[4].header_bytes() == 66 + 1 + 3 + 4);  // short tensors keep u32 dimensions
}

TEST_CASE("an encrypted file with a long meta tensor is version 5 with flags 3 and decrypts") {
  tz_test::temp_dir tmp;
  const std::string key_hex(64, 'a');
  auto enc = tensorizer_encryptor::from_key(*crypto::secret_key::from_hex(key_hex));
  const auto bytes = write_mixed(tmp.path / "enc.tensors", &enc);
  CHECK(get_le(bytes, 9, 8) == (flag_encrypted | flag_versioned_headers));
  auto r = file_reader::open((tmp.path / "enc.tensors").string());
  REQUIRE(r);
  CHECK(r->index().header.has_crypt_info());
  const auto dec = decryption::from_key(*crypto::secret_key::from_hex(key_hex));
  for (std::size_t i = 0; i < r->index().tensors.size(); ++i) {
    auto h = r->read_header(i);
    REQUIRE(h);
    std::vector<std::byte> data(r->index().tensors[i].data_length);
    REQUIRE(r->read_data(i, data));
    REQUIRE(decrypt_tensor(*h, data, dec, r->index().source));
    CHECK(verify_tensor(*h, data, r->index().source));
  }
  CHECK(r->index().tensors[3].is_meta());
}

TEST_CASE("the tags a first long tensor adds may overflow the metadata block: refused, the file stays untagged") {
  tz_test::temp_dir tmp;
  auto f4 = *parse_dtype("<f4");
  std::vector<std::byte> one(4);
  auto w = tensor_writer::create((tmp.path / "full.tensors").string());
  REQUIRE(w);
  // Four entries of 36 + 65490 bytes leave 40 of 262144: room for a short entry (37 bytes), not for
  // a long one (53) plus four tags.
  for (char c : {'p', 'q', 'r', 's'})
    REQUIRE(w->write({plain_path(std::string(65490, c)), tensor_type::state_dict, 0, f4, {1}, one, false}));
  auto refused = w->write({plain_path("L"), tensor_type::state_dict, 0, f4, {0, long_dim}, {}, false});
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == errc::unsupported);
  CHECK(says(refused.error(), "tensor 'L': metadata overflow"));
  CHECK(w->version() == 1);
  REQUIRE(w->write({plain_path("L"), tensor_type::state_dict, 0, f4, {1}, one, false}));
  REQUIRE(w->close());
  auto r = file_reader::open((tmp.path / "full.tensors").string());
  REQUIRE(r);
  CHECK(r->index().header.version == 1);
  CHECK(r->index().header.flags == 0);
  CHECK(r->index().tensors.size() == 5);
}

TEST_CASE("the writer refuses shapes whose element count or byte size overflows 64 bits") {
  tz_test::temp_dir tmp;
  auto w = tensor_writer::create((tmp.path / "o.tensors").string());
  REQUIRE(w);
  auto count = w->write({plain_path("n"), tensor_type::state_dict, 0, *parse_dtype("|u1"), {long_dim, long_dim}, {}, true});
  REQUIRE_FALSE(count);
  CHECK(says(count.error(), "tensor 'n': element count overflows 64 bits"));
  auto size = w->write({plain_path("n"), tensor_type::state_dict, 0, *parse_dtype("<f4"), {1ull << 31, 1ull << 31}, {}, true});
  REQUIRE_FALSE(size);
  CHECK(says(size.error(), "tensor 'n': byte size overflows 64 bits"));
}

TEST_CASE("malformed version 5 input: unknown entry tags, a flag bit 1 below version 5, a long header shape that disagrees") {
  tz_test::temp_dir tmp;
  const auto good = write_mixed(tmp.path / "v5.tensors");
  auto tag = good;
  tag[73] = std::byte{7};
  CHECK(says(open_error(tag), "metadata, field metadata_version at offset 73: tensor 0: unknown entry version 7 "
                              "(expected 1 or 5)"));
  auto v4 = good;
  v4[5] = std::byte{4};
  CHECK(says(open_error(v4), "field feature_flags at offset 9: feature flag versioned_headers (2) needs data "
                             "version 5, the file has version 4"));
  auto r = file_reader::open((tmp.path / "v5.tensors").string());
  REQUIRE(r);
  const auto& c = r->index().tensors[2];
  auto shape = good;  // the header's second (u64) dimension becomes 2^32 + 1
  shape[c.header_offset + 8 + 2 + 1 + 2 + 1 + 1 + 3 + 1 + 8] = std::byte{1};
  CHECK(says(open_error(shape), "tensor 'c' header at offset " + std::to_string(c.header_offset) +
                                    " disagrees with the metadata: shape expected [0,4294967296], got [0,4294967297]"));
}

TEST_CASE("a version 5 file without flag bit 1 has untagged entries, as tensorizer 2.12 reads it") {
  tz_test::temp_dir tmp;
  std::vector<std::byte> data(8);
  auto w = tensor_writer::create((tmp.path / "v4.tensors").string());
  REQUIRE(w);
  REQUIRE(w->write({plain_path("a"), tensor_type::state_dict, 0, *parse_dtype("<f4"), {2}, data, false}));
  REQUIRE(w->write({plain_path("m"), tensor_type::state_dict, 0, *parse_dtype("<f4"), {3}, {}, true}));
  REQUIRE(w->close());
  auto bytes = tz_test::read_file(tmp.path / "v4.tensors");
  bytes[5] = std::byte{5};
  tz_test::write_file(tmp.path / "v5.tensors", bytes);
  auto r = file_reader::open((tmp.path / "v5.tensors").string());
  REQUIRE(r);
  CHECK(r->index().header.version == 5);
  REQUIRE(r->index().tensors.size() == 2);
  CHECK(r->index().tensors[1].shape == std::vector<std::uint64_t>{3});
  CHECK(r->read_header(1));
}

TEST_CASE("data version 5 files with tagged metadata entries are read" * doctest::test_suite("reference")) {
  tz_test::temp_dir tmp;
  const auto small_mixed = tz_test::vectors_dir() / "small_mixed.tensors";
  tz_test::write_file(tmp.path / "v5.tensors", as_version5(tz_test::read_file(small_mixed), 1));
  auto r = file_reader::open((tmp.path / "v5.tensors").string());
  REQUIRE(r);
  auto ref = file_reader::open(small_mixed.string());
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
  CHECK(says(open_error(as_version5(tz_test::read_file(small_mixed), 7)), "unknown entry version 7"));
}

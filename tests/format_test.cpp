// format/ tests: the reference files (tests/vectors/make_vectors.py) read, verified and written back byte for byte.
#include "format_manifest.hpp"
#include "tz/format/writer.hpp"
#include "tz/crypto/hash.hpp"

#include <doctest/doctest.h>

using namespace tz;
using namespace tz::format;

namespace {

const char* plain_vectors[] = {"small_mixed", "module", "nested", "meta_v4"};

}  // namespace

TEST_CASE("every tensor of the reference files matches its manifest" * doctest::test_suite("reference")) {
  for (const char* name : plain_vectors) tz_test::check_manifest(tz_test::vectors_dir(), name);
}

TEST_CASE("reading and writing back a reference file gives identical bytes" * doctest::test_suite("reference")) {
  tz_test::temp_dir tmp;
  for (const char* name : plain_vectors) {
    CAPTURE(name);
    const auto in = tz_test::vectors_dir() / (std::string(name) + ".tensors");
    const auto out = tmp.path / (std::string(name) + ".tensors");
    tz_test::write_back(in, out);
    CHECK(tz_test::read_file(out) == tz_test::read_file(in));
  }
}

TEST_CASE("the encrypted reference file's crypt-info blocks are parsed" * doctest::test_suite("reference")) {
  auto manifest = tz_test::read_json(tz_test::vectors_dir() / "encrypted.manifest.json").as_object();
  auto reader = file_reader::open((tz_test::vectors_dir() / "encrypted.tensors").string());
  REQUIRE(reader);
  CHECK(reader->index().header.version == 3);
  CHECK(reader->index().header.has_crypt_info());
  for (std::size_t i = 0; i < reader->index().tensors.size(); ++i) {
    const auto& e = reader->index().tensors[i];
    auto h = reader->read_header(i);
    REQUIRE(h);
    REQUIRE(h->crypt);
    REQUIRE(h->crypt->cipher);
    CHECK(h->crypt->cipher->chunk_bytes == 2097152);
    CHECK(h->crypt->cipher->macs.size() == (e.data_length + 2097151) / 2097152);
    REQUIRE(h->hashes.size() == 1);  // SHA-256 only, over the plaintext
    CHECK(h->hashes[0].kind == hash_kind::sha256);
  }
  CHECK(manifest.at("tensors").as_array().size() == reader->index().tensors.size());
}

TEST_CASE("a corrupted data byte fails verification naming the tensor and both values" * doctest::test_suite("reference")) {
  tz_test::temp_dir tmp;
  auto bytes = tz_test::read_file(tz_test::vectors_dir() / "small_mixed.tensors");
  auto reader = file_reader::open((tz_test::vectors_dir() / "small_mixed.tensors").string());
  REQUIRE(reader);
  const auto& e = reader->index().tensors[0];
  bytes[e.data_offset] ^= std::byte{0x40};
  tz_test::write_file(tmp.path / "bad.tensors", bytes);
  auto bad = file_reader::open((tmp.path / "bad.tensors").string());
  REQUIRE(bad);
  auto h = bad->read_header(0);
  REQUIRE(h);
  std::vector<std::byte> data(e.data_length);
  REQUIRE(bad->read_data(0, data));
  auto v = verify_tensor(*h, data, bad->index().source);
  REQUIRE_FALSE(v);
  CHECK(v.error().code == errc::hash_mismatch);
  CHECK(v.error().message.find(display_name(e.path)) != std::string::npos);
  CHECK(v.error().message.find("CRC32") != std::string::npos);
  CHECK(v.error().message.find("expected") != std::string::npos);
}

TEST_CASE("names round-trip through the structured encoding like Python's json.dumps") {
  tensor_path p{{std::string("model"), std::uint64_t{0}, std::string("caf\xc3\xa9 \"q\""), std::string("\xf0\x9f\x98\x80")}};
  const auto stored = encode_name(p);
  CHECK(stored == "\x1e[\"model\",0,\"caf\\u00e9 \\\"q\\\"\",\"\\ud83d\\ude00\"]");
  auto back = decode_name(stored);
  REQUIRE(back);
  CHECK(*back == p);
  CHECK(encode_name(plain_path("a.b")) == "a.b");
  CHECK(encode_name(tensor_path{{std::uint64_t{0}}}) == "\x1e[0]");
  CHECK_FALSE(decode_name(""));
  CHECK_FALSE(decode_name("\x1e[1.5]"));
  CHECK_FALSE(decode_name("\x1e[-1]"));
  CHECK_FALSE(decode_name("\x1e{\"a\":1}"));
  CHECK_FALSE(decode_name("\x1e[\"a\"\n]"));
}

TEST_CASE("dtype strings decode to item sizes and torch names") {
  auto bf = parse_dtype(std::string("<V2\0torch.bfloat16", 18));
  REQUIRE(bf);
  CHECK(bf->itemsize == 2);
  CHECK(bf->opaque);
  CHECK(dtype_display(*bf) == "bfloat16");
  auto f4 = parse_dtype("<f4");
  REQUIRE(f4);
  CHECK(dtype_display(*f4) == "float32");
  CHECK(parse_dtype("|b1")->itemsize == 1);
  CHECK(parse_dtype("<c16")->itemsize == 16);
  auto f8 = dtype_from_torch("float8_e4m3fn");
  REQUIRE(f8);
  CHECK(f8->stored == std::string("|V1\0torch.float8_e4m3fn", 23));
  CHECK_FALSE(parse_dtype(">f4"));
  CHECK_FALSE(parse_dtype("<V2"));
  CHECK_FALSE(parse_dtype(std::string("<V2\0torch.a\0b", 13)));
  CHECK_FALSE(parse_dtype("<x4"));
  CHECK_FALSE(parse_dtype("<f"));
  CHECK_FALSE(dtype_from_torch("qint8"));
}

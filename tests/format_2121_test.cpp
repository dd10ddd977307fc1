// format/ tests against tensorizer 2.12.1 (suite reference_2121): the files it writes, data versions
// 1-5 plain and encrypted, are read bit-exact and written back byte for byte by ours.
#include "format_manifest.hpp"
#include "tz/format/encryption.hpp"

#include <doctest/doctest.h>

using namespace tz;
using namespace tz::format;

namespace {

// Versions 1-4: the cases both releases write (tests/vectors/cases.py).
const std::vector<std::string> shared_plain{"small_mixed", "module", "nested", "meta_v4"};
// Version 5, plain: long zero-size tensors among v2/v4 features; a 4 GiB meta tensor.
const std::vector<std::string> long_plain{"long_v5", "long_v5_meta"};
const std::vector<std::string> encrypted_files{"encrypted", "long_v5_encrypted"};

crypto::secret_key manifest_key(const boost::json::object& manifest) {
  return *crypto::secret_key::from_hex(std::string(manifest.at("encryption").at("key_hex").as_string()));
}

// Encrypts as tensorizer does, with the initial nonce tensorizer drew for each tensor of a given
// file (random nonces are the only bytes of an encrypted file a writer cannot reproduce).
class replay_encryptor final : public tensor_encryptor {
 public:
  replay_encryptor(crypto::secret_key key, std::vector<crypto::nonce> nonces)
      : key_(std::move(key)), nonces_(std::move(nonces)) {}

  result<std::vector<std::byte>> encrypt(std::span<std::byte> data) override {
    REQUIRE(next_ < nonces_.size());
    const auto& initial = nonces_[next_++];
    crypt_info info;
    auto& x = info.cipher.emplace();
    x.chunk_bytes = crypto::chunk_size_bytes;
    std::copy(initial.begin(), initial.end(), x.nonce.begin());
    for (const auto& m : crypto::seal_tensor(data, key_, initial)) {
      std::array<std::uint8_t, 16> stored{};
      std::copy(m.begin(), m.end(), stored.begin());
      x.macs.push_back(stored);
    }
    return encode_crypt_info(info);
  }
  std::uint64_t crypt_info_bytes(std::uint64_t data_bytes) const override {
    return 2 + 8 + 2 + 8 + 24 + 8 + 16 * ((data_bytes + crypto::chunk_size_bytes - 1) / crypto::chunk_size_bytes);
  }

 private:
  crypto::secret_key key_;
  std::vector<crypto::nonce> nonces_;
  std::size_t next_ = 0;
};

// The initial nonce of every encrypted tensor of a file, in file order.
std::vector<crypto::nonce> file_nonces(const std::filesystem::path& path) {
  auto reader = file_reader::open(path.string());
  REQUIRE(reader);
  std::vector<crypto::nonce> out;
  for (std::size_t i = 0; i < reader->index().tensors.size(); ++i) {
    auto h = reader->read_header(i);
    REQUIRE(h);
    if (!h->crypt || !h->crypt->cipher) continue;
    crypto::nonce n{};
    std::copy(h->crypt->cipher->nonce.begin(), h->crypt->cipher->nonce.end(), n.begin());
    out.push_back(n);
  }
  return out;
}

}  // namespace

TEST_SUITE("reference_2121") {
  TEST_CASE("tensorizer 2.12.1 writes data versions 1-4 byte for byte as 2.11.1 does") {
    for (const auto& name : shared_plain) {
      CAPTURE(name);
      const std::string file = name + ".tensors";
      CHECK(tz_test::read_file(tz_test::vectors_2121_dir() / file) == tz_test::read_file(tz_test::vectors_dir() / file));
    }
  }

  TEST_CASE("every tensor of the plain files tensorizer 2.12.1 writes matches its manifest") {
    for (const auto& name : shared_plain) tz_test::check_manifest(tz_test::vectors_2121_dir(), name);
    for (const auto& name : long_plain) tz_test::check_manifest(tz_test::vectors_2121_dir(), name);
  }

  TEST_CASE("our writer writes every plain 2.12.1 file back byte for byte, data version 5 included") {
    tz_test::temp_dir tmp;
    for (const auto* list : {&shared_plain, &long_plain}) {
      for (const auto& name : *list) {
        CAPTURE(name);
        const auto in = tz_test::vectors_2121_dir() / (name + ".tensors");
        const auto out = tmp.path / (name + ".tensors");
        tz_test::write_back(in, out);
        CHECK(tz_test::read_file(out) == tz_test::read_file(in));
      }
    }
  }

  TEST_CASE("2.12.1's encrypted files decrypt to their manifests; its data version 5 file has flags 3") {
    for (const auto& name : encrypted_files) {
      CAPTURE(name);
      const auto dir = tz_test::vectors_2121_dir();
      auto manifest = tz_test::read_json(dir / (name + ".manifest.json")).as_object();
      auto reader = file_reader::open((dir / (name + ".tensors")).string());
      REQUIRE(reader);
      const auto& fh = manifest.at("file_header").as_object();
      CHECK(reader->index().header.version == fh.at("data_version").to_number<std::uint32_t>());
      CHECK(reader->index().header.flags == fh.at("feature_flags").to_number<std::uint64_t>());
      CHECK(reader->index().header.has_crypt_info());
      const auto dec = decryption::from_key(manifest_key(manifest));
      const auto& tensors = manifest.at("tensors").as_array();
      REQUIRE(reader->index().tensors.size() == tensors.size());
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        const auto& e = reader->index().tensors[i];
        CAPTURE(display_name(e.path));
        CHECK(display_name(e.path) == tz_test::manifest_name(tensors[i].as_object()));
        auto h = reader->read_header(i);
        REQUIRE(h);
        std::vector<std::byte> data(e.data_length);
        REQUIRE(reader->read_data(i, data));
        REQUIRE(decrypt_tensor(*h, data, dec, reader->index().source));
        CHECK(verify_tensor(*h, data, reader->index().source));
        CHECK(tz_test::sha_of_load(e, data) == std::string(tensors[i].at("sha256").as_string()));
      }
    }
    CHECK(tz_test::read_file(tz_test::vectors_2121_dir() / "long_v5_encrypted.tensors")[9] == std::byte{3});
  }

  TEST_CASE("with 2.12.1's nonces our writer re-encrypts its encrypted files byte for byte") {
    tz_test::temp_dir tmp;
    for (const auto& name : encrypted_files) {
      CAPTURE(name);
      const auto in = tz_test::vectors_2121_dir() / (name + ".tensors");
      auto manifest = tz_test::read_json(tz_test::vectors_2121_dir() / (name + ".manifest.json")).as_object();
      replay_encryptor enc(manifest_key(manifest), file_nonces(in));
      const auto dec = decryption::from_key(manifest_key(manifest));
      const auto out = tmp.path / (name + ".tensors");
      tz_test::write_back(in, out, {&enc}, &dec);
      CHECK(tz_test::read_file(out) == tz_test::read_file(in));
    }
  }
}

// Tests of tz/sodium.hpp: nonces, chunk layout, seal/open round trips and tampering, keys and key
// files, Argon2id vectors, the key cache, and decryption of the real tensorizer reference file.
#include "tz/crypto/hash.hpp"
#include "tz/crypto/sodium.hpp"

#include <boost/json/src.hpp>  // header-only Boost.JSON, compiled into this one TU
#include <doctest/doctest.h>
#include <sodium.h>

#include "reference_vectors.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace crypto = tz::crypto;

// Lets doctest print a failed result<...> with its message (results of keys stay unprintable).
namespace tz {
std::ostream& operator<<(std::ostream& os, const error& e) { return os << errc_name(e.code) << ": " << e.message; }
}  // namespace tz

namespace {

constexpr std::uint64_t mib = 1 << 20;

std::vector<std::uint8_t> from_hex(std::string_view hex) {
  std::vector<std::uint8_t> out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::uint8_t>(std::stoi(std::string(hex.substr(2 * i, 2)), nullptr, 16));
  }
  return out;
}

template <std::size_t N>
std::array<std::uint8_t, N> array_from_hex(std::string_view hex) {
  const auto bytes = from_hex(hex);
  REQUIRE(bytes.size() == N);
  std::array<std::uint8_t, N> out{};
  std::copy(bytes.begin(), bytes.end(), out.begin());
  return out;
}

// Deterministic plaintext that does not repeat within a chunk.
std::vector<std::byte> pattern_bytes(std::size_t size) {
  std::vector<std::byte> out(size);
  std::uint32_t x = 0x9e3779b9U;
  for (auto& b : out) {
    x = x * 1664525U + 1013904223U;
    b = static_cast<std::byte>(x >> 24);
  }
  return out;
}

crypto::secret_key test_key(std::uint8_t fill = 0x42) {
  std::array<std::uint8_t, 32> raw{};
  raw.fill(fill);
  return crypto::secret_key::from_bytes(raw).value();
}

// Low bytes near 0xff so that chunk nonces carry across bytes.
crypto::nonce test_nonce() { return array_from_hex<24>("fdffffffffffffffffffffffffffffffffffffff00112233"); }

// A fresh private directory under /tmp, removed at scope exit.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tz_crypto_test.XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
};

void write_text(const std::filesystem::path& path, std::string_view text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string as_string(std::span<const std::uint8_t> bytes) { return {bytes.begin(), bytes.end()}; }

}  // namespace

static_assert(!std::is_copy_constructible_v<crypto::secret_key>);
static_assert(std::is_nothrow_move_constructible_v<crypto::secret_key>);
static_assert(!std::is_copy_constructible_v<crypto::passphrase>);

TEST_SUITE("nonce") {
  TEST_CASE("increment_nonce(n) equals sodium_increment applied n times, carries and wraps included") {
    REQUIRE(crypto::initialize());
    const std::vector<crypto::nonce> starts = {
        crypto::nonce{}, test_nonce(), array_from_hex<24>(std::string(48, 'f')),
        array_from_hex<24>("00ffffffffffffffff" + std::string(30, '0'))};
    for (const auto& start : starts) {
      crypto::nonce reference = start;
      for (std::uint64_t n = 0; n <= 70000; ++n) {
        if (n < 300 || n % 997 == 0 || n == 65535 || n == 65536 || n == 70000) {
          CHECK(crypto::increment_nonce(start, n) == reference);
        }
        sodium_increment(reference.data(), reference.size());
      }
    }
  }

  TEST_CASE("increment_nonce carries a full 64-bit addend into the upper bytes") {
    const auto max64 = crypto::increment_nonce(crypto::nonce{}, ~std::uint64_t{0});
    CHECK(tz::to_hex(max64) == std::string(16, 'f') + std::string(32, '0'));
    auto next = max64;
    sodium_increment(next.data(), next.size());
    CHECK(crypto::increment_nonce(max64, 1) == next);
    CHECK(tz::to_hex(next) == std::string(16, '0') + "01" + std::string(30, '0'));
  }
}

TEST_SUITE("layout") {
  TEST_CASE("chunk count is ceil(length / 2 MiB) and 0 for an empty tensor") {
    CHECK(crypto::chunk_layout{0}.count() == 0);
    CHECK(crypto::chunk_layout{1}.count() == 1);
    CHECK(crypto::chunk_layout{2 * mib}.count() == 1);
    CHECK(crypto::chunk_layout{2 * mib + 1}.count() == 2);
    CHECK(crypto::chunk_layout{5 * mib}.count() == 3);
    CHECK(crypto::chunk_layout{~std::uint64_t{0}, 1024}.count() == (~std::uint64_t{0} >> 10) + 1);
  }

  TEST_CASE("chunk ranges tile the tensor and only the last chunk is short") {
    const crypto::chunk_layout layout{5 * mib};
    CHECK(layout.range(0).offset_bytes == 0);
    CHECK(layout.range(0).size_bytes == 2 * mib);
    CHECK(layout.range(1).offset_bytes == 2 * mib);
    CHECK(layout.range(2).offset_bytes == 4 * mib);
    CHECK(layout.range(2).size_bytes == 1 * mib);
    CHECK(layout.range(crypto::chunk_range{1, 3}).size_bytes == 3 * mib);
    CHECK(layout.range(crypto::chunk_range{2, 2}).size_bytes == 0);
  }

  TEST_CASE("validate rejects a wrong MAC count and an invalid chunk size as format errors") {
    CHECK(crypto::validate(crypto::chunk_layout{5 * mib}, 3));
    const auto wrong_count = crypto::validate(crypto::chunk_layout{5 * mib}, 2);
    REQUIRE(!wrong_count);
    CHECK(wrong_count.error().code == tz::errc::format);
    CHECK(wrong_count.error().message.find("needs 3 MACs, the header has 2") != std::string::npos);
    CHECK(!crypto::validate(crypto::chunk_layout{10, 1000}, 1));  // not a multiple of 64
    CHECK(!crypto::validate(crypto::chunk_layout{10, 960}, 1));   // below 1024
    CHECK(crypto::validate(crypto::chunk_layout{10, 1024}, 1));
  }
}

TEST_SUITE("secretbox") {
  TEST_CASE("seal_tensor then open_tensor restores the plaintext at every size boundary") {
    const auto key = test_key();
    for (const std::uint64_t size : {std::uint64_t{0}, std::uint64_t{1}, 2 * mib, 2 * mib + 1, 5 * mib}) {
      CAPTURE(size);
      const auto plain = pattern_bytes(size);
      auto data = plain;
      const auto macs = crypto::seal_tensor(data, key, test_nonce());
      CHECK(macs.size() == crypto::chunk_layout{size}.count());
      CHECK(data.size() == plain.size());
      if (size > 0) CHECK(data != plain);
      REQUIRE(crypto::open_tensor(data, key, test_nonce(), macs));
      CHECK(data == plain);
    }
  }

  TEST_CASE("chunk i is sealed with nonce initial + i") {
    const auto key = test_key();
    const auto plain = pattern_bytes(5 * mib);
    auto data = plain;
    const auto macs = crypto::seal_tensor(data, key, test_nonce());
    auto chunk2 = std::vector<std::byte>(plain.begin() + 4 * mib, plain.end());
    CHECK(crypto::seal_chunk(chunk2, crypto::increment_nonce(test_nonce(), 2), key) == macs[2]);
    CHECK(std::equal(chunk2.begin(), chunk2.end(), data.begin() + 4 * mib));
  }

  TEST_CASE("one MAC (num_macs == 1) is the same as one secretbox over the whole data") {
    const auto key = test_key();
    for (const std::uint64_t size : {std::uint64_t{1}, std::uint64_t{4097}, 2 * mib}) {
      const auto plain = pattern_bytes(size);
      auto chunked = plain;
      auto whole = plain;
      const auto macs = crypto::seal_tensor(chunked, key, test_nonce());
      REQUIRE(macs.size() == 1);
      CHECK(crypto::seal_chunk(whole, test_nonce(), key) == macs[0]);
      CHECK(whole == chunked);
      CHECK(crypto::open_chunk(whole, test_nonce(), key, macs[0]));
      CHECK(whole == plain);
    }
  }

  TEST_CASE("tampered ciphertext fails at its chunk; earlier chunks are opened, later ones untouched") {
    const auto key = test_key();
    const auto plain = pattern_bytes(5 * mib);
    auto data = plain;
    const auto macs = crypto::seal_tensor(data, key, test_nonce());
    data[2 * mib + 12345] ^= std::byte{0x01};
    const auto tampered = data;
    std::uint64_t bad = 99;
    const auto opened = crypto::open_tensor(data, key, test_nonce(), macs, &bad);
    REQUIRE(!opened);
    CHECK(opened.error().code == tz::errc::crypto);
    CHECK(opened.error().message.find("chunk 1 of 3 (bytes 2097152..4194304 of 5242880)") != std::string::npos);
    CHECK(bad == 1);
    CHECK(std::equal(data.begin(), data.begin() + 2 * mib, plain.begin()));
    CHECK(std::equal(data.begin() + 2 * mib, data.end(), tampered.begin() + 2 * mib));
  }

  TEST_CASE("a tampered MAC, a wrong nonce or a wrong key fails, leaving the failed chunk unchanged") {
    const auto key = test_key();
    const auto plain = pattern_bytes(3 * mib);
    auto data = plain;
    auto macs = crypto::seal_tensor(data, key, test_nonce());
    const auto sealed = data;
    std::uint64_t bad = 99;

    auto bad_macs = macs;
    bad_macs[1][15] ^= 0x80;
    CHECK(!crypto::open_tensor(data, key, test_nonce(), bad_macs, &bad));
    CHECK(bad == 1);
    CHECK(std::equal(data.begin(), data.begin() + 2 * mib, plain.begin()));  // chunk 0 was fine
    CHECK(std::equal(data.begin() + 2 * mib, data.end(), sealed.begin() + 2 * mib));
    data = sealed;

    auto bad_nonce = test_nonce();
    bad_nonce[23] ^= 0x01;
    CHECK(!crypto::open_tensor(data, key, bad_nonce, macs, &bad));
    CHECK(bad == 0);
    CHECK(!crypto::open_tensor(data, key, crypto::increment_nonce(test_nonce(), 1), macs));

    CHECK(!crypto::open_tensor(data, test_key(0x43), test_nonce(), macs, &bad));
    CHECK(bad == 0);
    CHECK(data == sealed);
    CHECK(crypto::open_tensor(data, key, test_nonce(), macs));
  }

  TEST_CASE("a wrong MAC count or a mismatched buffer is rejected before anything is opened") {
    const auto key = test_key();
    auto data = pattern_bytes(3 * mib);
    const auto macs = crypto::seal_tensor(data, key, test_nonce());
    const auto sealed = data;
    const auto too_few = crypto::open_tensor(data, key, test_nonce(), std::span(macs).first(1));
    REQUIRE(!too_few);
    CHECK(too_few.error().code == tz::errc::format);
    const crypto::chunk_layout layout{data.size()};
    const auto wrong_span = crypto::open_chunks(std::span(data).first(mib), layout, {0, 1}, key, test_nonce(), macs);
    REQUIRE(!wrong_span);
    CHECK(wrong_span.error().code == tz::errc::invalid_argument);
    CHECK(!crypto::open_chunks(data, layout, {1, 3}, key, test_nonce(), macs));
    CHECK(data == sealed);
  }

  TEST_CASE("disjoint chunk ranges open on separate threads from their own slices") {
    const auto key = test_key();
    const auto plain = pattern_bytes(9 * mib + 7);
    auto data = plain;
    const crypto::chunk_layout layout{data.size()};
    std::vector<crypto::mac> macs(layout.count());
    // Seal in two slices as a parallel writer would, then open chunk by chunk on 5 threads.
    const auto head = layout.range(crypto::chunk_range{0, 2});
    REQUIRE(crypto::seal_chunks(std::span(data).first(head.size_bytes), layout, {0, 2}, key, test_nonce(), macs));
    REQUIRE(crypto::seal_chunks(std::span(data).subspan(head.size_bytes), layout, {2, 5}, key, test_nonce(), macs));
    auto whole = plain;
    CHECK(macs == crypto::seal_tensor(whole, key, test_nonce()));
    CHECK(whole == data);
    std::vector<std::thread> workers;
    std::vector<int> ok(layout.count(), 0);
    for (std::uint64_t i = 0; i < layout.count(); ++i) {
      workers.emplace_back([&, i] {
        const auto range = layout.range(i);
        auto slice = std::span(data).subspan(range.offset_bytes, range.size_bytes);
        ok[i] = crypto::open_chunks(slice, layout, {i, i + 1}, key, test_nonce(), macs) ? 1 : 0;
      });
    }
    for (auto& worker : workers) worker.join();
    CHECK(std::count(ok.begin(), ok.end(), 1) == 5);
    CHECK(data == plain);
  }
}

TEST_SUITE("keys") {
  TEST_CASE("a key must be exactly 32 bytes or 64 hex digits") {
    const std::vector<std::uint8_t> short_key(31);
    const auto too_short = crypto::secret_key::from_bytes(short_key);
    REQUIRE(!too_short);
    CHECK(too_short.error().code == tz::errc::invalid_argument);
    CHECK(too_short.error().message.find("got 31") != std::string::npos);
    CHECK(!crypto::secret_key::from_bytes(std::vector<std::uint8_t>(33)));
    CHECK(!crypto::secret_key::from_hex(std::string(63, 'a')));
    CHECK(!crypto::secret_key::from_hex(std::string(62, 'a') + "zz"));
    const auto hex = crypto::secret_key::from_hex(std::string(64, '4'));
    REQUIRE(hex.has_value());
    CHECK(hex->equals(test_key(0x44)));
    CHECK(crypto::secret_key::from_hex(std::string(64, 'A'))->equals(test_key(0xaa)));
    CHECK(!hex->equals(test_key(0x45)));
  }

  TEST_CASE("random keys differ and a moved-from key is empty") {
    auto a = crypto::secret_key::random().value();
    const auto b = crypto::secret_key::random().value();
    CHECK(!a.equals(b));
    const auto moved = std::move(a);
    CHECK(a.empty());  // NOLINT(bugprone-use-after-move): checking the documented state
    CHECK(!moved.empty());
  }

  TEST_CASE("a saved key file has mode 0600, replaces an old file and loads back") {
    temp_dir dir;
    const auto path = dir.path / "tensor.key";
    write_text(path, "old contents");
    ::chmod(path.c_str(), 0644);
    const auto key = crypto::secret_key::random().value();
    REQUIRE(key.save_file(path));
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(st.st_size == 32);
    CHECK(std::distance(std::filesystem::directory_iterator(dir.path), {}) == 1);  // no temp left
    const auto loaded = crypto::secret_key::load_file(path);
    REQUIRE(loaded.has_value());
    CHECK(loaded->equals(key));
  }

  TEST_CASE("loading a missing or wrongly sized key file fails with the path and size") {
    temp_dir dir;
    const auto missing = crypto::secret_key::load_file(dir.path / "absent.key");
    REQUIRE(!missing);
    CHECK(missing.error().code == tz::errc::not_found);
    write_text(dir.path / "hex.key", std::string(64, 'a'));
    const auto wrong = crypto::secret_key::load_file(dir.path / "hex.key");
    REQUIRE(!wrong);
    CHECK(wrong.error().message.find("hex.key' must hold exactly 32 bytes, has 64") != std::string::npos);
    CHECK(!test_key().save_file(dir.path / "no_such_dir" / "k.key"));
  }

  TEST_CASE("a passphrase file loses exactly one trailing newline and must not be empty") {
    temp_dir dir;
    const auto load = [&](std::string_view text) {
      write_text(dir.path / "pw", text);
      return crypto::passphrase::load_file(dir.path / "pw");
    };
    CHECK(as_string(load("secret\n")->bytes()) == "secret");
    CHECK(as_string(load("secret\r\n")->bytes()) == "secret");
    CHECK(as_string(load("secret\n\n")->bytes()) == "secret\n");
    CHECK(as_string(load("secret")->bytes()) == "secret");
    CHECK(!load("\n"));
    CHECK(!load(""));
    CHECK(!crypto::passphrase::from_string(""));
    auto pass = crypto::passphrase::from_string("pw").value();
    CHECK(as_string(pass.bytes()) == "pw");
    const auto moved = std::move(pass);
    CHECK(pass.bytes().empty());  // NOLINT(bugprone-use-after-move): checking the documented state
    CHECK(as_string(moved.bytes()) == "pw");
  }
}

TEST_SUITE("kdf") {
  // Expected keys computed once on this machine with the real tensorizer 2.11.1 (libnacl over
  // Debian's libsodium 1.0.18):
  //   EncryptionParams.from_string("tensorizer", opslimit=OpsLimit.MIN, memlimit=MemLimit.MIN,
  //                                salt=bytes(16)).key.hex()
  // and cross-checked with ctypes on libsodium.so.23:
  //   crypto_pwhash(out, 32, b"tensorizer", 10, bytes(16), 1, 8192, 2).
  TEST_CASE("Argon2id with MIN limits matches tensorizer's from_string key") {
    const auto pass = crypto::passphrase::from_string("tensorizer").value();
    crypto::kdf_params params{crypto::kdf_min.opslimit, crypto::kdf_min.memlimit_bytes};
    auto key = crypto::derive_key(pass, params);
    REQUIRE(key.has_value());
    CHECK(tz::to_hex(key->bytes()) == "290622b6b13a02df2d107c1b87440ffe3cb9da0fdd879cee8e161827fa7f6563");
    for (std::uint8_t i = 0; i < 16; ++i) params.salt[i] = i;  // salt=bytes(range(16))
    key = crypto::derive_key(pass, params);
    REQUIRE(key.has_value());
    CHECK(tz::to_hex(key->bytes()) == "76f5cb2c675c341789d6698fd629c6319a6fc1d74cdde4b58b37910db3054b8f");
  }

  TEST_CASE("kdf params outside libsodium's ranges or the reader's limits are rejected") {
    CHECK(crypto::validate(crypto::kdf_params{}));
    CHECK(crypto::validate(crypto::kdf_params{crypto::kdf_sensitive.opslimit, crypto::kdf_sensitive.memlimit_bytes}));
    const auto bad_alg = crypto::validate(crypto::kdf_params{1, 8192, 1});
    REQUIRE(!bad_alg);
    CHECK(bad_alg.error().code == tz::errc::unsupported);
    CHECK(bad_alg.error().message.find("Unsupported pwhash algorithm (1)") != std::string::npos);
    CHECK(!crypto::validate(crypto::kdf_params{0, 8192}));
    CHECK(!crypto::validate(crypto::kdf_params{1, 8191}));
    const crypto::kdf_limits unlimited{~std::uint64_t{0}, ~std::uint64_t{0}};
    CHECK(!crypto::validate(crypto::kdf_params{std::uint64_t{1} << 32, 8192}, unlimited));
    CHECK(!crypto::validate(crypto::kdf_params{1, crypto::memlimit_max_bytes + 1}, unlimited));
    const auto hostile = crypto::validate(crypto::kdf_params{1, std::uint64_t{1} << 40});
    REQUIRE(!hostile);
    CHECK(hostile.error().message.find("memlimit_max_bytes") != std::string::npos);
    CHECK(!crypto::derive_key(crypto::passphrase::from_string("x").value(), crypto::kdf_params{1000, 8192}));
  }

  TEST_CASE("the key cache derives once per (passphrase, params, salt), also under concurrency") {
    crypto::key_cache cache;
    const auto pass = crypto::passphrase::from_string("tensorizer").value();
    crypto::kdf_params params{1, 8192};
    std::vector<std::shared_ptr<const crypto::secret_key>> keys(4);
    std::vector<std::thread> workers;
    for (auto& slot : keys) workers.emplace_back([&] { slot = cache.derive(pass, params).value(); });
    for (auto& worker : workers) worker.join();
    CHECK(cache.derivation_count() == 1);
    for (const auto& key : keys) CHECK(key == keys[0]);
    CHECK(tz::to_hex(keys[0]->bytes()) == "290622b6b13a02df2d107c1b87440ffe3cb9da0fdd879cee8e161827fa7f6563");

    params.salt[0] = 1;
    CHECK(cache.derive(pass, params).value() != keys[0]);
    CHECK(cache.derivation_count() == 2);
    CHECK(cache.derive(crypto::passphrase::from_string("other").value(), params));
    CHECK(cache.derivation_count() == 3);
    CHECK(!cache.derive(pass, crypto::kdf_params{1, 8192, 7}));
    CHECK(cache.derivation_count() == 3);
  }
}

TEST_SUITE("reference") {
  TEST_CASE("every tensor of tensorizer's encrypted.tensors decrypts to the manifest's sha256") {
    const std::filesystem::path vectors = tz_test::vectors_dir();
    std::ifstream manifest_file(vectors / "encrypted.manifest.json");
    std::stringstream text;
    text << manifest_file.rdbuf();
    const auto manifest = boost::json::parse(text.str()).as_object();
    const auto key = crypto::secret_key::from_hex(std::string(manifest.at("encryption").at("key_hex").as_string()));
    REQUIRE(key.has_value());
    const int fd = ::open((vectors / "encrypted.tensors").c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);

    std::size_t checked = 0;
    std::size_t multi_chunk = 0;
    for (const auto& entry : manifest.at("tensors").as_array()) {
      const auto& file = entry.at("file").as_object();
      const auto& chunk = file.at("crypt_info").at("chunks").as_array().at(0).as_object();
      CAPTURE(entry.at("name"));
      REQUIRE(chunk.at("chunk_type").to_number<int>() == 2);
      const auto chunk_size = chunk.at("chunk_size").to_number<std::uint64_t>();
      const auto initial = array_from_hex<24>(chunk.at("nonce_hex").as_string());
      std::vector<crypto::mac> macs;
      for (const auto& mac_hex : chunk.at("macs_hex").as_array()) {
        macs.push_back(array_from_hex<16>(mac_hex.as_string()));
      }

      std::vector<std::byte> data(file.at("data_length").to_number<std::size_t>());
      const auto offset = file.at("data_offset").to_number<off_t>();
      REQUIRE(::pread(fd, data.data(), data.size(), offset) == static_cast<ssize_t>(data.size()));
      const std::string expected(entry.at("sha256").as_string());
      CHECK(tz::to_hex(tz::sha256(data)) != expected);  // really ciphertext

      auto tampered = data;
      tampered.back() ^= std::byte{0x01};
      CHECK(!crypto::open_tensor(tampered, *key, initial, macs, nullptr, chunk_size));
      REQUIRE(crypto::open_tensor(data, *key, initial, macs, nullptr, chunk_size));
      CHECK(tz::to_hex(tz::sha256(data)) == expected);
      ++checked;
      if (macs.size() > 1) ++multi_chunk;
    }
    ::close(fd);
    CHECK(checked == manifest.at("tensor_count").to_number<std::size_t>());
    CHECK(multi_chunk >= 1);
  }
}

// Tests of tz/hash.hpp: CRC-32 against zlib and known values, crc32_combine over random splits,
// SHA-256 in random pieces against one-shot and the FIPS 180-2 vectors, hashers on many threads.
#include "tz/crypto/hash.hpp"

#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

std::span<const std::byte> as_bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::vector<std::byte> random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

std::uint32_t zlib_crc(std::span<const std::byte> b) {
  return static_cast<std::uint32_t>(::crc32_z(0, reinterpret_cast<const Bytef*>(b.data()), b.size()));
}

// Lengths that exercise every tail and block path: 0, tiny, odd, around powers of two, a few MiB.
std::vector<std::size_t> test_lengths(std::mt19937_64& rng) {
  std::vector<std::size_t> out = {0, 1, 2, 3, 7, 15, 16, 17, 31, 63, 64, 65, 127, 255, 256, 257, 4095, 4097, 65537};
  for (int i = 0; i < 40; ++i) out.push_back(rng() % 200000);
  out.push_back((std::size_t{3} << 20) + 13);
  return out;
}

// Cuts [0, n) at `cuts` random points (repeats allowed, so empty pieces occur).
std::vector<std::size_t> random_cuts(std::mt19937_64& rng, std::size_t n, int cuts) {
  std::vector<std::size_t> at = {0, n};
  for (int i = 0; i < cuts; ++i) at.push_back(n == 0 ? 0 : rng() % (n + 1));
  std::sort(at.begin(), at.end());
  return at;
}

tz::sha256_digest digest_of_hex(std::string_view hex) {
  tz::sha256_digest out{};
  REQUIRE(hex.size() == 64);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::uint8_t>(std::stoi(std::string(hex.substr(2 * i, 2)), nullptr, 16));
  return out;
}

}  // namespace

TEST_CASE("crc32: known values of the zlib / IEEE 802.3 CRC-32") {
  CHECK(tz::crc32({}) == 0);
  CHECK(tz::crc32(as_bytes("123456789")) == 0xCBF43926U);
  CHECK(tz::crc32(as_bytes("The quick brown fox jumps over the lazy dog")) == 0x414FA339U);
}

TEST_CASE("crc32_update equals zlib's crc32 on random data of any length and alignment") {
  std::mt19937_64 rng(1);
  const auto data = random_bytes(rng, (std::size_t{3} << 20) + 64);
  for (std::size_t n : test_lengths(rng)) {
    const std::size_t start = rng() % 64;  // unaligned starts too
    const auto piece = std::span(data).subspan(start, n);
    CAPTURE(n);
    CAPTURE(start);
    CHECK(tz::crc32_update(0, piece) == zlib_crc(piece));
    CHECK(tz::crc32(piece) == zlib_crc(piece));
  }
}

TEST_CASE("crc32_update in random pieces, and crc32_combine over random splits, equal the one-shot CRC") {
  std::mt19937_64 rng(2);
  const auto data = random_bytes(rng, (std::size_t{3} << 20) + 64);
  for (std::size_t n : test_lengths(rng)) {
    const auto whole = std::span(data).first(n);
    const std::uint32_t want = zlib_crc(whole);
    const auto cuts = random_cuts(rng, n, 1 + static_cast<int>(rng() % 6));
    std::uint32_t chained = 0, combined = 0;
    tz::crc32_hasher hasher;
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
      const auto piece = whole.subspan(cuts[i], cuts[i + 1] - cuts[i]);
      chained = tz::crc32_update(chained, piece);
      hasher.update(piece);
      combined = tz::crc32_combine(combined, tz::crc32_update(0, piece), piece.size());
    }
    CAPTURE(n);
    CHECK(chained == want);
    CHECK(hasher.value() == want);
    CHECK(combined == want);
  }
}

TEST_CASE("crc32_combine: edge cases and agreement with zlib's crc32_combine on any values") {
  std::mt19937_64 rng(3);
  CHECK(tz::crc32_combine(0x12345678U, 0, 0) == 0x12345678U);  // empty b
  CHECK(tz::crc32_combine(0, 0xCBF43926U, 9) == 0xCBF43926U);  // empty a
  for (int i = 0; i < 200; ++i) {
    const auto a = static_cast<std::uint32_t>(rng()), b = static_cast<std::uint32_t>(rng());
    const std::uint64_t len = i < 100 ? rng() % 100000 : rng() % (std::uint64_t{1} << 40);
    CAPTURE(len);
    CHECK(tz::crc32_combine(a, b, len) == ::crc32_combine(a, b, static_cast<z_off_t>(len)));
  }
}

TEST_CASE("sha256: FIPS 180-2 vectors, one-shot and incremental") {
  CHECK(tz::sha256({}) == digest_of_hex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
  CHECK(tz::sha256(as_bytes("abc")) ==
        digest_of_hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  CHECK(tz::sha256(as_bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        digest_of_hex("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
  const std::string million(1000000, 'a');
  const auto want = digest_of_hex("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  CHECK(tz::sha256(as_bytes(million)) == want);
  tz::sha256_hasher h;
  for (std::size_t off = 0; off < million.size(); off += 999)
    h.update(as_bytes(million).subspan(off, std::min<std::size_t>(999, million.size() - off)));
  CHECK(h.finish() == want);
}

TEST_CASE("sha256_hasher in random pieces equals one-shot; reset starts a new message") {
  std::mt19937_64 rng(4);
  const auto data = random_bytes(rng, (std::size_t{3} << 20) + 64);
  tz::sha256_hasher reused;
  for (std::size_t n : test_lengths(rng)) {
    const auto whole = std::span(data).subspan(rng() % 64, n);
    const auto want = tz::sha256(whole);
    const auto cuts = random_cuts(rng, n, 1 + static_cast<int>(rng() % 6));
    tz::sha256_hasher fresh;
    reused.reset();
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
      fresh.update(whole.subspan(cuts[i], cuts[i + 1] - cuts[i]));
      reused.update(whole.subspan(cuts[i], cuts[i + 1] - cuts[i]));
    }
    CAPTURE(n);
    CHECK(fresh.finish() == want);
    CHECK(reused.finish() == want);
  }
}

TEST_CASE("sha256_hasher: moved, and made on many threads at once") {
  const auto want = tz::sha256(as_bytes("abc"));
  tz::sha256_hasher a;
  a.update(as_bytes("a"));
  tz::sha256_hasher b = std::move(a);
  b.update(as_bytes("bc"));
  CHECK(b.finish() == want);
  a = tz::sha256_hasher();  // a moved-from hasher takes a new one
  a.update(as_bytes("abc"));
  CHECK(a.finish() == want);

  std::vector<int> ok(8, 0);
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < ok.size(); ++t) {
    pool.emplace_back([&ok, &want, t] {
      bool all = true;
      for (int i = 0; i < 200; ++i) {
        tz::sha256_hasher h;
        h.update(as_bytes("abc"));
        all = all && h.finish() == want;
      }
      ok[t] = all ? 1 : 0;
    });
  }
  for (auto& th : pool) th.join();
  CHECK(std::count(ok.begin(), ok.end(), 1) == static_cast<long>(ok.size()));
}

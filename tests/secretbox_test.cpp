// The GPU secretbox arithmetic (cuda/secretbox_math.hpp) run on the host and checked against libsodium.
#include "secretbox_math.hpp"

#include "test_bytes.hpp"

#include <doctest/doctest.h>
#include <sodium.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using namespace tz::cuda::sbox;
using bytes = std::vector<std::uint8_t>;

constexpr std::uint64_t mib2 = 2 * 1024 * 1024;
// Every length class: empty, under one block, block edges, keystream-block edges, many blocks, 2 MiB.
const std::uint64_t lengths[] = {0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1023, 1024, 4096 + 5, mib2 - 1, mib2};

void require_sodium() { REQUIRE(sodium_init() >= 0); }

// libsodium declares its pointers non-null even for 0 bytes (UBSan checks): an empty vector gets one.
std::uint8_t* data_of(bytes& v) {
  static std::uint8_t empty[1];
  return v.empty() ? empty : v.data();
}

// A Poly1305 one-time key (r || s, 32 bytes) as the field element r, clamped, and the words of s.
struct poly_key {
  fe r;
  std::uint32_t s[4];
};

poly_key to_poly_key(const std::uint8_t k[32]) {
  poly_key out;
  out.r = fe_from_words(load_le32(k) & 0x0fffffff, load_le32(k + 4) & 0x0ffffffc, load_le32(k + 8) & 0x0ffffffc,
                        load_le32(k + 12) & 0x0ffffffc, 0);
  for (int i = 0; i < 4; ++i) out.s[i] = load_le32(k + 16 + 4 * i);
  return out;
}

// h over the whole message with `lanes` lanes, lane by lane in order, summed mod p.
fe poly_sum(const bytes& message, const fe& r, std::uint64_t lanes) {
  fe table[20];
  unsigned count = 1;
  while ((std::uint64_t{1} << (count - 1)) < lanes) ++count;
  fe_pow_table(table, count + 1, r);  // one more so that lanes itself (not a power of two) fits
  const fe r_lanes = fe_pow(table, count + 1, lanes);
  const std::uint64_t blocks = poly_block_count(message.size());
  const byte_block_loader load{message.data(), message.size()};
  fe h = fe_zero();
  for (std::uint64_t lane = 0; lane < lanes; ++lane) {
    h = fe_carry(fe_add(h, poly1305_lane(load, blocks, lane, lanes, r_lanes, table, count + 1)));
  }
  return h;
}

std::array<std::uint8_t, 16> tag_bytes(const fe& h, const std::uint32_t s[4]) {
  std::uint32_t tag[4];
  poly1305_tag(h, s, tag);
  std::array<std::uint8_t, 16> out{};
  for (int i = 0; i < 4; ++i) store_le32(out.data() + 4 * i, tag[i]);
  return out;
}

// One sealed chunk: what the kernels get (ciphertext, nonce, MAC) and what opening must give.
struct sealed_chunk {
  bytes data;
  std::array<std::uint8_t, 24> nonce{};
  std::array<std::uint8_t, 16> mac{};
  bytes plain;
};

sealed_chunk seal(bytes plain, const std::uint8_t key[32], const std::array<std::uint8_t, 24>& nonce) {
  sealed_chunk out{plain, nonce, {}, plain};
  REQUIRE(crypto_secretbox_detached(data_of(out.data), out.mac.data(), data_of(plain), plain.size(), nonce.data(),
                                    key) == 0);
  return out;
}

// poly1305_kernel then open_kernel for one batch, on the host, CTA by CTA and thread by thread:
// the same shape, lanes, partial sums and quarter XORs as the GPU. Returns the per-chunk flags.
std::vector<bool> emulate_kernels(std::vector<sealed_chunk>& batch, const std::uint8_t key[32]) {
  std::uint64_t length_max = 0;
  for (const auto& c : batch) length_max = std::max<std::uint64_t>(length_max, c.data.size());
  const launch_shape shape = shape_for(length_max);
  std::vector<bool> flags;
  for (auto& c : batch) {
    const chunk_key k = derive_chunk_key(key, c.nonce.data());
    fe table[pow_table_max];
    fe_pow_table(table, shape.table_count, k.r);
    const std::uint64_t blocks = poly_block_count(c.data.size());
    fe h = fe_zero();
    for (unsigned cta = 0; cta < shape.poly_ctas; ++cta) {
      fe partial = fe_zero();
      for (unsigned t = 0; t < threads_per_cta; ++t) {
        const fe share = poly1305_lane(byte_block_loader{c.data.data(), c.data.size()}, blocks,
                                       std::uint64_t{cta} * threads_per_cta + t, shape.lanes,
                                       table[shape.table_count - 1], table, shape.table_count);
        partial = fe_carry(fe_add(partial, share));
      }
      h = fe_carry(fe_add(h, partial));
    }
    std::uint32_t tag[4];
    std::uint32_t mac[4];
    poly1305_tag(h, k.s, tag);
    for (int i = 0; i < 4; ++i) mac[i] = load_le32(c.mac.data() + 4 * i);
    flags.push_back(tag_equal(tag, mac));
    if (!flags.back()) continue;
    for (std::uint64_t b = 0; b < keystream_block_count(c.data.size()); ++b) {
      std::uint32_t ks[16];
      xsalsa20_block(ks, k.subkey, k.nonce_tail, b);
      for (unsigned q = 0; q < 4; ++q) xor_keystream_quarter(c.data.data(), c.data.size(), b, q, ks);
    }
  }
  return flags;
}

TEST_CASE("the XSalsa20 keystream matches crypto_stream_xsalsa20, also past block 2^32") {
  require_sodium();
  const bytes key = tz::test::pattern<std::uint8_t>(32, 1);
  const bytes nonce = tz::test::pattern<std::uint8_t>(24, 2);
  bytes expected(64 * 5);
  crypto_stream_xsalsa20(expected.data(), expected.size(), nonce.data(), key.data());
  std::uint32_t subkey[8];
  hsalsa20(subkey, key.data(), nonce.data());
  const std::uint32_t tail[2] = {load_le32(nonce.data() + 16), load_le32(nonce.data() + 20)};
  for (std::uint64_t b = 0; b < 5; ++b) {
    std::uint32_t ks[16];
    xsalsa20_block(ks, subkey, tail, b);
    for (int i = 0; i < 16; ++i) CHECK(ks[i] == load_le32(expected.data() + 64 * b + 4 * i));
  }
  // crypto_stream_xsalsa20_xor_ic starts at a block index: a counter with a high word checks the carry.
  const std::uint64_t far = (std::uint64_t{1} << 32) + 7;
  bytes zeros(64, 0), far_block(64);
  crypto_stream_xsalsa20_xor_ic(far_block.data(), zeros.data(), 64, nonce.data(), far, key.data());
  std::uint32_t ks[16];
  xsalsa20_block(ks, subkey, tail, far);
  for (int i = 0; i < 16; ++i) CHECK(ks[i] == load_le32(far_block.data() + 4 * i));
}

TEST_CASE("a chunk's Poly1305 key is the first 32 keystream bytes") {
  require_sodium();
  const bytes key = tz::test::pattern<std::uint8_t>(32, 3);
  const bytes nonce = tz::test::pattern<std::uint8_t>(24, 4);
  std::uint8_t stream[32];
  crypto_stream_xsalsa20(stream, sizeof stream, nonce.data(), key.data());
  const chunk_key k = derive_chunk_key(key.data(), nonce.data());
  const poly_key expected = to_poly_key(stream);
  for (int i = 0; i < 5; ++i) CHECK(k.r.v[i] == expected.r.v[i]);
  for (int i = 0; i < 4; ++i) CHECK(k.s[i] == expected.s[i]);
}

TEST_CASE("Poly1305 in lanes equals crypto_onetimeauth_poly1305 for every length class and lane count") {
  require_sodium();
  const std::uint64_t lane_counts[] = {1, 2, 3, 7, 32, 256, 1000, 4096, 16384};
  for (const std::uint64_t length : lengths) {
    bytes message = tz::test::pattern<std::uint8_t>(length, static_cast<std::uint32_t>(length));
    const bytes key = tz::test::pattern<std::uint8_t>(32, static_cast<std::uint32_t>(length) + 9);
    std::array<std::uint8_t, 16> expected{};
    crypto_onetimeauth_poly1305(expected.data(), data_of(message), message.size(), key.data());
    const poly_key k = to_poly_key(key.data());
    for (const std::uint64_t lanes : lane_counts) {
      // 2 MiB with a single lane is libsodium's own sequential order; skip the slowest repeats.
      if (length >= mib2 - 1 && lanes < 256 && lanes != 1) continue;
      CAPTURE(length);
      CAPTURE(lanes);  // lanes > blocks for the short lengths: idle lanes add zero
      CHECK(tag_bytes(poly_sum(message, k.r, lanes), k.s) == expected);
    }
  }
}

TEST_CASE("Poly1305 reduces correctly at the edges: all-ones blocks, the largest r and s") {
  require_sodium();
  std::uint8_t key[32];
  std::memset(key, 0xff, sizeof key);  // r clamps to its largest value; s = 2^128 - 1 wraps the sum
  for (const std::uint64_t length : {16, 17, 48, 4096}) {
    const bytes message(length, 0xff);
    std::array<std::uint8_t, 16> expected{};
    crypto_onetimeauth_poly1305(expected.data(), message.data(), message.size(), key);
    const poly_key k = to_poly_key(key);
    for (const std::uint64_t lanes : {1, 3, 64}) {
      CAPTURE(length);
      CAPTURE(lanes);
      CHECK(tag_bytes(poly_sum(message, k.r, lanes), k.s) == expected);
    }
  }
}

TEST_CASE("nonce_add carries across every byte like sodium_add") {
  require_sodium();
  const std::uint64_t addends[] = {0, 1, 2, 255, 256, 65535, 65536, std::uint64_t{1} << 40, ~std::uint64_t{0}};
  for (const std::uint8_t fill : {std::uint8_t{0xff}, std::uint8_t{0xfe}, std::uint8_t{0x00}}) {
    std::array<std::uint8_t, 24> initial{};
    initial.fill(fill);
    for (const std::uint64_t n : addends) {
      std::array<std::uint8_t, 24> expected = initial;
      std::array<std::uint8_t, 24> addend{};
      for (int i = 0; i < 8; ++i) addend[i] = static_cast<std::uint8_t>(n >> (8 * i));
      sodium_add(expected.data(), addend.data(), expected.size());
      std::array<std::uint8_t, 24> got{};
      nonce_add(got.data(), initial.data(), n);
      CAPTURE(n);
      CHECK(got == expected);
    }
  }
}

TEST_CASE("the launch shape gives a 2 MiB chunk 16 CTAs of lanes and caps longer chunks") {
  const launch_shape empty = shape_for(0);
  CHECK(empty.poly_ctas == 1);
  CHECK(empty.lanes == threads_per_cta);
  CHECK(empty.table_count == 9);  // 2^8 = 256 lanes
  const launch_shape full = shape_for(mib2);
  CHECK(full.poly_ctas == 16);
  CHECK(full.lanes == 4096);
  CHECK(full.table_count == 13);
  CHECK(full.xor_ctas == 65);  // 32769 keystream blocks, 512 per CTA
  const launch_shape huge = shape_for(std::uint64_t{1} << 30);
  CHECK(huge.poly_ctas == poly_ctas_max);
  CHECK(huge.table_count == pow_table_max);
  CHECK(huge.xor_ctas == xor_ctas_max);
}

TEST_CASE("the kernels' decomposition opens every chunk-size class that crypto_secretbox_detached sealed") {
  require_sodium();
  const bytes key = tz::test::pattern<std::uint8_t>(32, 5);
  std::vector<sealed_chunk> batch;
  for (const std::uint64_t length : lengths) {
    std::array<std::uint8_t, 24> nonce{};
    const bytes n = tz::test::pattern<std::uint8_t>(24, static_cast<std::uint32_t>(length) + 77);
    std::copy(n.begin(), n.end(), nonce.begin());
    batch.push_back(seal(tz::test::pattern<std::uint8_t>(length, static_cast<std::uint32_t>(length) + 1), key.data(), nonce));
  }
  // One launch per length, as well as all of them in one launch (the shape of the longest).
  for (auto& chunk : batch) {
    std::vector<sealed_chunk> one{chunk};
    CAPTURE(chunk.data.size());
    CHECK(emulate_kernels(one, key.data()) == std::vector<bool>{true});
    CHECK(one[0].data == one[0].plain);
  }
  const auto flags = emulate_kernels(batch, key.data());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    CAPTURE(batch[i].data.size());
    CHECK(flags[i]);
    CHECK(batch[i].data == batch[i].plain);
  }
}

TEST_CASE("a whole tensor: chunks with carrying nonces, a partial last chunk, one tampered chunk") {
  require_sodium();
  const bytes key = tz::test::pattern<std::uint8_t>(32, 6);
  constexpr std::uint64_t chunk_size = 4096;
  const bytes tensor = tz::test::pattern<std::uint8_t>(5 * chunk_size + 1000, 8);
  std::array<std::uint8_t, 24> initial{};
  initial.fill(0xff);  // +1 already carries through all 24 bytes
  initial[0] = 0xfd;
  std::vector<sealed_chunk> chunks;
  std::array<std::uint8_t, 24> sodium_nonce = initial;  // libsodium's own increment as the writer
  for (std::uint64_t off = 0; off < tensor.size(); off += chunk_size) {
    const auto end = std::min<std::uint64_t>(off + chunk_size, tensor.size());
    chunks.push_back(seal(bytes(tensor.begin() + off, tensor.begin() + end), key.data(), sodium_nonce));
    sodium_increment(sodium_nonce.data(), sodium_nonce.size());
  }
  REQUIRE(chunks.size() == 6);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    std::array<std::uint8_t, 24> nonce{};
    nonce_add(nonce.data(), initial.data(), i);  // what the launcher's caller computes
    REQUIRE(nonce == chunks[i].nonce);
  }
  SUBCASE("every chunk opens") {
    CHECK(emulate_kernels(chunks, key.data()) == std::vector<bool>(6, true));
    bytes opened;
    for (const auto& c : chunks) opened.insert(opened.end(), c.data.begin(), c.data.end());
    CHECK(opened == tensor);
  }
  SUBCASE("a flipped ciphertext bit and a wrong MAC fail their chunks only, which stay ciphertext") {
    chunks[1].data[100] ^= 0x10;
    chunks[5].mac[15] ^= 0x01;
    const bytes sealed1 = chunks[1].data, sealed5 = chunks[5].data;
    CHECK(emulate_kernels(chunks, key.data()) == std::vector<bool>{true, false, true, true, true, false});
    CHECK(chunks[1].data == sealed1);
    CHECK(chunks[5].data == sealed5);
    CHECK(chunks[0].data == chunks[0].plain);
  }
}

}  // namespace

// XSalsa20-Poly1305 secretbox-open arithmetic shared by the CUDA kernels and their host tests.
//
// Everything here is plain C++17 on fixed-size integers, with no CUDA type: nvcc compiles it as
// __host__ __device__ code for secretbox_kernels.cu, g++ as ordinary inline functions for
// tests/secretbox_test.cpp, which checks it against libsodium. Written from the algorithms'
// definitions (Bernstein's Salsa20, XSalsa20 and Poly1305 papers); libsodium is only the oracle.
//
// Poly1305 is arranged for parallel evaluation. A message of n 16-byte blocks m_1..m_n gives
// h = sum m_i * r^(n-i+1) mod p, p = 2^130 - 5. With L lanes, lane j (0-based) runs Horner with
// r^L over blocks j, j+L, j+2L, ... (0-based block indices); its last block b_last is one of the
// last L blocks, so multiplying its result by r^(n - b_last) gives exactly that lane's share of h,
// and the lanes' shares sum to h mod p. Powers of r come from a table of r^(2^k).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define TZ_SBOX_HD __host__ __device__ __forceinline__
#else
#define TZ_SBOX_HD inline
#endif
// Only the device pass: GCC, compiling the host side of a .cu file or a test, knows no such pragma.
#if defined(__CUDA_ARCH__)
#define TZ_SBOX_UNROLL _Pragma("unroll")
#else
#define TZ_SBOX_UNROLL
#endif

namespace tz::cuda::sbox {

inline constexpr std::uint32_t limb_mask = 0x3ffffff;  // 26 bits
// Threads per CTA of both kernels; the host emulation in the tests groups lanes the same way.
inline constexpr unsigned threads_per_cta = 256;
// Poly1305 CTAs per chunk: a power of two, so that lanes (= CTAs * 256) is one too and r^lanes
// is a table entry. 64 CTAs of 256 lanes cover 8 MiB at 32 blocks per lane.
inline constexpr unsigned poly_ctas_max = 64;
inline constexpr unsigned poly_blocks_per_lane = 32;
// r^(2^k) for k = 0 .. log2(lanes max = 16384): the largest exponent a lane needs is lanes itself.
inline constexpr unsigned pow_table_max = 15;
inline constexpr unsigned xor_blocks_per_thread = 2;  // 64-byte keystream blocks per thread
inline constexpr unsigned xor_ctas_max = 4096;
// Chunks per launch, and the scratch of one launch: 5 limbs per CTA per chunk.
inline constexpr unsigned batch_max = 16;
inline constexpr std::size_t scratch_bytes = std::size_t{batch_max} * poly_ctas_max * 5 * sizeof(std::uint32_t);

// ---- bytes and words --------------------------------------------------------------------------

TZ_SBOX_HD std::uint32_t load_le32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 | std::uint32_t{p[3]} << 24;
}

TZ_SBOX_HD void store_le32(std::uint8_t* p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v);
  p[1] = static_cast<std::uint8_t>(v >> 8);
  p[2] = static_cast<std::uint8_t>(v >> 16);
  p[3] = static_cast<std::uint8_t>(v >> 24);
}

TZ_SBOX_HD std::uint32_t rotl32(std::uint32_t x, unsigned n) { return (x << n) | (x >> (32 - n)); }

// out = in + n as a 192-bit little-endian integer mod 2^192: chunk i's nonce is nonce_add(initial, i).
TZ_SBOX_HD void nonce_add(std::uint8_t out[24], const std::uint8_t in[24], std::uint64_t n) {
  unsigned carry = 0;
  for (unsigned i = 0; i < 24; ++i) {
    const unsigned addend = i < 8 ? static_cast<unsigned>((n >> (8 * i)) & 0xffU) : 0U;
    const unsigned sum = in[i] + addend + carry;
    out[i] = static_cast<std::uint8_t>(sum);
    carry = sum >> 8;
  }
}

// ---- Salsa20 ---------------------------------------------------------------------------------

TZ_SBOX_HD void quarter_round(std::uint32_t& a, std::uint32_t& b, std::uint32_t& c, std::uint32_t& d) {
  b ^= rotl32(a + d, 7);
  c ^= rotl32(b + a, 9);
  d ^= rotl32(c + b, 13);
  a ^= rotl32(d + c, 18);
}

// The 20 rounds (10 column + row double rounds) on the state, without the final addition.
TZ_SBOX_HD void salsa20_rounds(std::uint32_t x[16]) {
  TZ_SBOX_UNROLL
  for (int i = 0; i < 10; ++i) {
    quarter_round(x[0], x[4], x[8], x[12]);
    quarter_round(x[5], x[9], x[13], x[1]);
    quarter_round(x[10], x[14], x[2], x[6]);
    quarter_round(x[15], x[3], x[7], x[11]);
    quarter_round(x[0], x[1], x[2], x[3]);
    quarter_round(x[5], x[6], x[7], x[4]);
    quarter_round(x[10], x[11], x[8], x[9]);
    quarter_round(x[15], x[12], x[13], x[14]);
  }
}

// The Salsa20 input: "expand 32-byte k" on the diagonal, the key around it, then 4 words of
// input (nonce and block counter for Salsa20, the 16-byte nonce prefix for HSalsa20).
TZ_SBOX_HD void salsa20_state(std::uint32_t x[16], const std::uint32_t key[8], const std::uint32_t in[4]) {
  x[0] = 0x61707865;
  x[5] = 0x3320646e;
  x[10] = 0x79622d32;
  x[15] = 0x6b206574;
  for (int i = 0; i < 4; ++i) {
    x[1 + i] = key[i];
    x[11 + i] = key[4 + i];
    x[6 + i] = in[i];
  }
}

// HSalsa20: the XSalsa20 subkey from the key and the first 16 bytes of the 24-byte nonce.
TZ_SBOX_HD void hsalsa20(std::uint32_t subkey[8], const std::uint8_t key[32], const std::uint8_t nonce16[16]) {
  std::uint32_t k[8];
  std::uint32_t in[4];
  for (int i = 0; i < 8; ++i) k[i] = load_le32(key + 4 * i);
  for (int i = 0; i < 4; ++i) in[i] = load_le32(nonce16 + 4 * i);
  std::uint32_t x[16];
  salsa20_state(x, k, in);
  salsa20_rounds(x);
  // No feed-forward: the diagonal and the input positions are the output.
  const int picks[8] = {0, 5, 10, 15, 6, 7, 8, 9};
  for (int i = 0; i < 8; ++i) subkey[i] = x[picks[i]];
}

// Keystream block `block` (64 bytes as 16 little-endian words) of XSalsa20 with this subkey and
// the last 8 nonce bytes (as 2 words): Salsa20 with the block index as its 64-bit counter.
TZ_SBOX_HD void xsalsa20_block(std::uint32_t out[16], const std::uint32_t subkey[8],
                               const std::uint32_t nonce_tail[2], std::uint64_t block) {
  const std::uint32_t in[4] = {nonce_tail[0], nonce_tail[1], static_cast<std::uint32_t>(block),
                               static_cast<std::uint32_t>(block >> 32)};
  std::uint32_t x[16];
  salsa20_state(x, subkey, in);
  std::uint32_t start[16];
  for (int i = 0; i < 16; ++i) start[i] = x[i];
  salsa20_rounds(x);
  for (int i = 0; i < 16; ++i) out[i] = x[i] + start[i];
}

// ---- Poly1305 field arithmetic: five 26-bit limbs, 32x32->64 products (native on the GPU) ------

// A value mod 2^130 - 5. "Weak" form: every limb below 2^27, which fe_mul and fe_carry produce
// and every function here accepts; fe_add of two weak values (limbs below 2^28) is also accepted.
struct fe {
  std::uint32_t v[5];
};

TZ_SBOX_HD fe fe_zero() { return fe{{0, 0, 0, 0, 0}}; }

// Four little-endian words plus `top` (1 for a full block: the 2^128 bit) as a field element.
TZ_SBOX_HD fe fe_from_words(std::uint32_t w0, std::uint32_t w1, std::uint32_t w2, std::uint32_t w3,
                            std::uint32_t top) {
  return fe{{w0 & limb_mask, ((w0 >> 26) | (w1 << 6)) & limb_mask, ((w1 >> 20) | (w2 << 12)) & limb_mask,
             ((w2 >> 14) | (w3 << 18)) & limb_mask, (w3 >> 8) | (top << 24)}};
}

TZ_SBOX_HD fe fe_add(const fe& a, const fe& b) {
  return fe{{a.v[0] + b.v[0], a.v[1] + b.v[1], a.v[2] + b.v[2], a.v[3] + b.v[3], a.v[4] + b.v[4]}};
}

// Propagates carries once around (2^130 = 5 mod p), returning limbs to the weak form.
TZ_SBOX_HD fe fe_carry(fe h) {
  std::uint32_t c = 0;
  for (int i = 0; i < 5; ++i) {
    h.v[i] += c;
    c = h.v[i] >> 26;
    h.v[i] &= limb_mask;
  }
  h.v[0] += c * 5;
  c = h.v[0] >> 26;
  h.v[0] &= limb_mask;
  h.v[1] += c;
  return h;
}

// a * b mod p, weakly reduced. Limbs below 2^28 in, so every column sum stays below 2^61.
TZ_SBOX_HD fe fe_mul(const fe& a, const fe& b) {
  const std::uint64_t a0 = a.v[0], a1 = a.v[1], a2 = a.v[2], a3 = a.v[3], a4 = a.v[4];
  const std::uint64_t b0 = b.v[0], b1 = b.v[1], b2 = b.v[2], b3 = b.v[3], b4 = b.v[4];
  // Products past 2^130 wrap around multiplied by 5.
  const std::uint64_t s1 = b1 * 5, s2 = b2 * 5, s3 = b3 * 5, s4 = b4 * 5;
  std::uint64_t d[5] = {a0 * b0 + a1 * s4 + a2 * s3 + a3 * s2 + a4 * s1,
                        a0 * b1 + a1 * b0 + a2 * s4 + a3 * s3 + a4 * s2,
                        a0 * b2 + a1 * b1 + a2 * b0 + a3 * s4 + a4 * s3,
                        a0 * b3 + a1 * b2 + a2 * b1 + a3 * b0 + a4 * s4,
                        a0 * b4 + a1 * b3 + a2 * b2 + a3 * b1 + a4 * b0};
  std::uint64_t c = 0;
  fe h;
  for (int i = 0; i < 5; ++i) {
    d[i] += c;
    c = d[i] >> 26;
    h.v[i] = static_cast<std::uint32_t>(d[i]) & limb_mask;
  }
  const std::uint64_t h0 = h.v[0] + c * 5;
  h.v[0] = static_cast<std::uint32_t>(h0) & limb_mask;
  h.v[1] += static_cast<std::uint32_t>(h0 >> 26);
  return h;
}

// table[k] = r^(2^k) for k < count (count <= pow_table_max).
TZ_SBOX_HD void fe_pow_table(fe table[], unsigned count, const fe& r) {
  table[0] = r;
  for (unsigned k = 1; k < count; ++k) table[k] = fe_mul(table[k - 1], table[k - 1]);
}

// r^e for 1 <= e < 2^count, from fe_pow_table's table.
TZ_SBOX_HD fe fe_pow(const fe table[], unsigned count, std::uint64_t e) {
  fe result = fe_zero();
  bool started = false;
  for (unsigned k = 0; k < count; ++k) {
    if (((e >> k) & 1U) == 0) continue;
    result = started ? fe_mul(result, table[k]) : table[k];
    started = true;
  }
  return result;
}

// h mod p, mod 2^128, plus s: the tag as four little-endian words.
TZ_SBOX_HD void poly1305_tag(fe h, const std::uint32_t s[4], std::uint32_t tag[4]) {
  // Two passes leave every limb below 2^26, so h < 2^130 and h - p < 5: one conditional subtract.
  h = fe_carry(fe_carry(h));
  std::uint32_t g[5];
  std::uint32_t c = 5;
  for (int i = 0; i < 5; ++i) {
    g[i] = h.v[i] + c;
    c = g[i] >> 26;
    g[i] &= limb_mask;
  }
  // g = h + 5 - 2^130 is the reduced value when it is not negative, i.e. when h >= p.
  const std::uint32_t keep_g = 0U - c;  // all ones when h + 5 carried past 2^130
  for (int i = 0; i < 5; ++i) h.v[i] = (h.v[i] & ~keep_g) | (g[i] & keep_g);
  const std::uint32_t w[4] = {h.v[0] | (h.v[1] << 26), (h.v[1] >> 6) | (h.v[2] << 20),
                              (h.v[2] >> 12) | (h.v[3] << 14), (h.v[3] >> 18) | (h.v[4] << 8)};
  std::uint64_t sum = 0;
  for (int i = 0; i < 4; ++i) {
    sum += std::uint64_t{w[i]} + s[i];
    tag[i] = static_cast<std::uint32_t>(sum);
    sum >>= 32;
  }
}

// True when the tag equals the 16 MAC bytes; looks at every word (no early out).
TZ_SBOX_HD bool tag_equal(const std::uint32_t tag[4], const std::uint32_t mac[4]) {
  std::uint32_t diff = 0;
  for (int i = 0; i < 4; ++i) diff |= tag[i] ^ mac[i];
  return diff == 0;
}

// ---- the secretbox's per-chunk keys ----------------------------------------------------------

// What the kernels need per chunk, derived from the key and the chunk's nonce on the host.
struct chunk_key {
  std::uint32_t subkey[8];      // HSalsa20(key, nonce[0..16))
  std::uint32_t nonce_tail[2];  // nonce[16..24) as the Salsa20 nonce
  fe r;                         // the clamped Poly1305 multiplier
  std::uint32_t s[4];           // the Poly1305 pad
};

// Keystream block 0's first 32 bytes are the one-time Poly1305 key (r, s); the message is XORed
// with the keystream from byte 32 on.
TZ_SBOX_HD chunk_key derive_chunk_key(const std::uint8_t key[32], const std::uint8_t nonce[24]) {
  chunk_key out;
  hsalsa20(out.subkey, key, nonce);
  out.nonce_tail[0] = load_le32(nonce + 16);
  out.nonce_tail[1] = load_le32(nonce + 20);
  std::uint32_t block0[16];
  xsalsa20_block(block0, out.subkey, out.nonce_tail, 0);
  out.r = fe_from_words(block0[0] & 0x0fffffff, block0[1] & 0x0ffffffc, block0[2] & 0x0ffffffc,
                        block0[3] & 0x0ffffffc, 0);
  for (int i = 0; i < 4; ++i) out.s[i] = block0[4 + i];
  return out;
}

// ---- Poly1305 lanes --------------------------------------------------------------------------

TZ_SBOX_HD std::uint64_t poly_block_count(std::uint64_t length_bytes) { return (length_bytes + 15) / 16; }

// Block `index` of a message read byte by byte; the last one, when partial, is padded with a
// 1 byte and has no 2^128 bit. The kernels use a vector load for full aligned blocks instead.
struct byte_block_loader {
  const std::uint8_t* message;
  std::uint64_t length_bytes;

  TZ_SBOX_HD fe operator()(std::uint64_t index) const {
    const std::uint64_t offset = index * 16;
    const std::uint64_t left = length_bytes - offset;
    if (left >= 16) {
      const std::uint8_t* p = message + offset;
      return fe_from_words(load_le32(p), load_le32(p + 4), load_le32(p + 8), load_le32(p + 12), 1);
    }
    std::uint8_t padded[16] = {};
    for (std::uint64_t i = 0; i < left; ++i) padded[i] = message[offset + i];
    padded[left] = 1;
    return fe_from_words(load_le32(padded), load_le32(padded + 4), load_le32(padded + 8), load_le32(padded + 12), 0);
  }
};

// Lane `lane` of `lanes`: Horner with r_lanes = r^lanes over blocks lane, lane + lanes, ... of a
// message of `blocks` blocks, times r^(blocks - last block): this lane's share of h. Zero for a
// lane without blocks (lanes > blocks). `table` holds r^(2^k) with 2^count > lanes.
template <class BlockLoader>
TZ_SBOX_HD fe poly1305_lane(const BlockLoader& load, std::uint64_t blocks, std::uint64_t lane, std::uint64_t lanes,
                            const fe& r_lanes, const fe table[], unsigned count) {
  if (lane >= blocks) return fe_zero();
  fe acc = load(lane);
  std::uint64_t last = lane;
  for (std::uint64_t b = lane + lanes; b < blocks; b += lanes) {
    acc = fe_add(fe_mul(acc, r_lanes), load(b));
    last = b;
  }
  return fe_mul(acc, fe_pow(table, count, blocks - last));
}

// ---- keystream --------------------------------------------------------------------------------

// Keystream blocks a message of `length_bytes` uses (the first 32 bytes of block 0 are the key).
TZ_SBOX_HD std::uint64_t keystream_block_count(std::uint64_t length_bytes) {
  return length_bytes == 0 ? 0 : (length_bytes + 32 + 63) / 64;
}

// XORs quarter q (0..3) of keystream block `block` into the message bytes it covers, byte by
// byte: keystream bytes [64 block + 16 q, +16) meet message bytes 32 earlier, clipped to
// [0, length_bytes). The kernels use one vector load and store for quarters fully inside.
TZ_SBOX_HD void xor_keystream_quarter(std::uint8_t* message, std::uint64_t length_bytes, std::uint64_t block,
                                      unsigned q, const std::uint32_t ks[16]) {
  const std::uint64_t stream_offset = block * 64 + q * 16;
  if (stream_offset < 32) return;
  const std::uint64_t first = stream_offset - 32;
  for (unsigned i = 0; i < 16 && first + i < length_bytes; ++i) {
    const unsigned k = q * 16 + i;
    message[first + i] ^= static_cast<std::uint8_t>(ks[k / 4] >> (8 * (k % 4)));
  }
}

// ---- the launch shape ------------------------------------------------------------------------

// How one launch is cut, from its longest chunk: every chunk of the batch gets the same grid.
struct launch_shape {
  unsigned poly_ctas = 1;    // Poly1305 CTAs per chunk (a power of two)
  std::uint64_t lanes = 0;   // poly_ctas * threads_per_cta
  unsigned table_count = 1;  // r^(2^k) for k < table_count; lanes = 2^(table_count - 1)
  unsigned xor_ctas = 1;     // keystream CTAs per chunk
};

TZ_SBOX_HD launch_shape shape_for(std::uint64_t length_max_bytes) {
  launch_shape shape;
  const std::uint64_t blocks = poly_block_count(length_max_bytes);
  while (shape.poly_ctas < poly_ctas_max &&
         std::uint64_t{shape.poly_ctas} * threads_per_cta * poly_blocks_per_lane < blocks) {
    shape.poly_ctas *= 2;
  }
  shape.lanes = std::uint64_t{shape.poly_ctas} * threads_per_cta;
  while ((std::uint64_t{1} << (shape.table_count - 1)) < shape.lanes) ++shape.table_count;
  const std::uint64_t per_cta = std::uint64_t{threads_per_cta} * xor_blocks_per_thread;
  const std::uint64_t xor_ctas = (keystream_block_count(length_max_bytes) + per_cta - 1) / per_cta;
  shape.xor_ctas = xor_ctas < 1 ? 1 : xor_ctas > xor_ctas_max ? xor_ctas_max : static_cast<unsigned>(xor_ctas);
  return shape;
}

}  // namespace tz::cuda::sbox

// CRC-32 arithmetic shared by the CUDA kernel (crc32_kernels.cu), its host emulation and host tests.
//
// Plain C++ on fixed-size integers with no CUDA type: nvcc compiles it as __host__ __device__ code,
// g++ as ordinary inline functions. Written from the definition of the CRC; zlib is only the oracle
// of the tests.
//
// The representation. A polynomial over GF(2) of degree < 32 is a 32-bit word whose bit 31 - k is
// the coefficient of x^k (the "reflected" order of zlib and gzip, so x^0 is 0x80000000). The CRC's
// raw register is such a polynomial: the message so far times x^32, mod P. Multiplying by x is a
// right shift; the coefficient of x^31 (bit 0) then becomes x^32, which is replaced by its
// remainder P - x^32, whose reflected word is `polynomial`. Feeding a byte b is r = (r ^ b) x^8 mod P.
// The standard CRC of data (zlib's crc32(0, ...)) is ~update(~0, data).
//
// Combining. For pieces A then B, crc(A || B) = multmodp(x^(8 |B|), crc(A)) ^ crc(B) (zlib's
// crc32_combine; the pre- and post-inversions cancel). Unrolled over many pieces, the CRC of a job
// is the XOR over its pieces of multmodp(x^(8 * bytes after the piece), crc(piece)): every piece is
// independent, and the order in which the terms are XORed does not matter.
//
// The parallel decomposition. A job is cut into spans of span_bytes from its first byte; one thread
// hashes one span and computes that span's term. A CTA of threads_per_cta threads covers cta_bytes;
// a launch's grid is (CTAs for its longest job, jobs). The terms are XORed within each warp and
// atomically XORed into the job's result, which the launcher zeroed first: one kernel, no scratch.
// reference_job_crc runs exactly this decomposition on the host, so CI without a GPU tests it.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define TZ_CRC_HD __host__ __device__ __forceinline__
#else
#define TZ_CRC_HD inline
#endif

namespace tz::cuda::crc {

inline constexpr std::uint32_t polynomial = 0xEDB88320;  // x^32 mod P, reflected
inline constexpr std::uint32_t x0 = 0x80000000;          // the polynomial 1
inline constexpr unsigned threads_per_cta = 256;
inline constexpr std::uint64_t span_bytes = 4096;
inline constexpr std::uint64_t cta_bytes = span_bytes * threads_per_cta;  // 1 MiB
inline constexpr unsigned batch_max = 64;  // jobs per launch
// x^(2^k) mod P for k < x2k_count. x8n needs k = j + 3 for bit j of a byte count: with bit 63,
// k = 66, so every 64-bit count is covered and x8n has no precondition.
inline constexpr unsigned x2k_count = 67;

// ---- one polynomial -------------------------------------------------------------------------

TZ_CRC_HD constexpr std::uint32_t times_x(std::uint32_t a) { return (a >> 1) ^ (polynomial & (0U - (a & 1U))); }

// a * b mod P. Walks a's coefficients from x^0 (bit 31) up, adding b x^k for each set one; it
// stops when a has no higher coefficient left.
TZ_CRC_HD constexpr std::uint32_t multmodp(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (; a != 0; a <<= 1) {
    if ((a & x0) != 0) product ^= b;
    b = times_x(b);
  }
  return product;
}

struct x2k_table {
  std::uint32_t v[x2k_count];
};

// x^(2^k) mod P by repeated squaring from x^1.
TZ_CRC_HD constexpr x2k_table make_x2k_table() {
  x2k_table out{};
  out.v[0] = x0 >> 1;  // x^1
  for (unsigned k = 1; k < x2k_count; ++k) out.v[k] = multmodp(out.v[k - 1], out.v[k - 1]);
  return out;
}

// x^(8 n) mod P: the product of x^(2^(j + 3)) over the set bits j of n.
TZ_CRC_HD constexpr std::uint32_t x8n(const std::uint32_t x2k[], std::uint64_t n) {
  std::uint32_t product = x0;
  for (unsigned k = 3; n != 0; ++k, n >>= 1) {
    if ((n & 1U) != 0) product = multmodp(x2k[k], product);
  }
  return product;
}

// ---- tables and updates ---------------------------------------------------------------------

// t[k][i] = the raw register after byte i followed by k zero bytes, from a zero register:
// (i x^(8 (k + 1))) mod P. t[0] drives the byte update, all eight the slicing-by-8 update.
struct crc_tables {
  std::uint32_t t[8][256];
};

// Column i of every table: byte i shifted through 8, 16, ... 64 bit steps. Columns are
// independent, so the kernel's 256 threads fill one each.
TZ_CRC_HD constexpr void fill_table_column(crc_tables& tables, unsigned i) {
  std::uint32_t r = i;
  for (unsigned k = 0; k < 8; ++k) {
    for (int bit = 0; bit < 8; ++bit) r = times_x(r);
    tables.t[k][i] = r;
  }
}

TZ_CRC_HD constexpr crc_tables make_tables() {
  crc_tables out{};
  for (unsigned i = 0; i < 256; ++i) fill_table_column(out, i);
  return out;
}

// The raw register after `size_bytes` more bytes. (r ^ b) x^8 splits into the low byte, which
// t[0] reduces, and the rest, which only shifts down by 8 (no coefficient passes x^31).
TZ_CRC_HD std::uint32_t update_bytes(const crc_tables& tables, std::uint32_t r, const std::uint8_t* data,
                                     std::uint64_t size_bytes) {
  for (std::uint64_t i = 0; i < size_bytes; ++i) r = tables.t[0][(r ^ data[i]) & 0xffU] ^ (r >> 8);
  return r;
}

// The raw register after 8 bytes given as little-endian words (lo: bytes 0-3, hi: bytes 4-7).
// Byte m of the 8, with the register folded into bytes 0-3, is followed by 7 - m more bytes:
// its share of the result is t[7 - m] at its value.
TZ_CRC_HD std::uint32_t update_word(const crc_tables& tables, std::uint32_t r, std::uint32_t lo, std::uint32_t hi) {
  const std::uint32_t v = r ^ lo;
  return tables.t[7][v & 0xffU] ^ tables.t[6][(v >> 8) & 0xffU] ^ tables.t[5][(v >> 16) & 0xffU] ^
         tables.t[4][v >> 24] ^ tables.t[3][hi & 0xffU] ^ tables.t[2][(hi >> 8) & 0xffU] ^
         tables.t[1][(hi >> 16) & 0xffU] ^ tables.t[0][hi >> 24];
}

TZ_CRC_HD std::uint32_t load_le32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 | std::uint32_t{p[3]} << 24;
}

// update_bytes by slicing-by-8: 8 bytes per step, any alignment (bytes assembled into words).
TZ_CRC_HD std::uint32_t update_slice8(const crc_tables& tables, std::uint32_t r, const std::uint8_t* data,
                                      std::uint64_t size_bytes) {
  const std::uint64_t words = size_bytes / 8;
  for (std::uint64_t w = 0; w < words; ++w) {
    r = update_word(tables, r, load_le32(data + 8 * w), load_le32(data + 8 * w + 4));
  }
  return update_bytes(tables, r, data + 8 * words, size_bytes % 8);
}

// ---- the decomposition ----------------------------------------------------------------------

TZ_CRC_HD std::uint64_t span_count(std::uint64_t job_bytes) { return (job_bytes + span_bytes - 1) / span_bytes; }

// CTAs a launch needs per job: enough for its longest job (0 when every job is empty).
TZ_CRC_HD std::uint64_t ctas_for(std::uint64_t job_bytes_max) { return (job_bytes_max + cta_bytes - 1) / cta_bytes; }

struct span {
  std::uint64_t offset_bytes;  // from the job's first byte: a multiple of span_bytes
  std::uint64_t size_bytes;    // span_bytes, or less for the job's last span
  std::uint64_t after_bytes;   // job bytes after the span
};

// Span `index` (< span_count(job_bytes)) of a job.
TZ_CRC_HD span span_at(std::uint64_t job_bytes, std::uint64_t index) {
  const std::uint64_t offset = index * span_bytes;
  const std::uint64_t left = job_bytes - offset;
  const std::uint64_t size = left < span_bytes ? left : span_bytes;
  return span{offset, size, left - size};
}

// A span's term of its job's CRC, from the span's own standard CRC.
TZ_CRC_HD std::uint32_t contribution(const std::uint32_t x2k[], std::uint32_t span_crc, std::uint64_t after_bytes) {
  return multmodp(x8n(x2k, after_bytes), span_crc);
}

// ---- the host's copy ------------------------------------------------------------------------

// Computed at compile time: no initialisation order, nothing mutable.
inline constexpr crc_tables host_tables = make_tables();
inline constexpr x2k_table host_x2k = make_x2k_table();

// The CRC of a job computed span by span, as the kernel's threads do, in order on this thread.
// Not for speed (tz::crc32 is the host's CRC): it is what the emulation and the tests run.
inline std::uint32_t reference_job_crc(const std::uint8_t* data, std::size_t size_bytes) {
  std::uint32_t result = 0;
  for (std::uint64_t index = 0; index < span_count(size_bytes); ++index) {
    const span s = span_at(size_bytes, index);
    const std::uint32_t span_crc = ~update_slice8(host_tables, ~0U, data + s.offset_bytes, s.size_bytes);
    result ^= contribution(host_x2k.v, span_crc, s.after_bytes);
  }
  return result;
}

}  // namespace tz::cuda::crc

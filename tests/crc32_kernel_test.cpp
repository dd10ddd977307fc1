// The GPU CRC-32 arithmetic (cuda/crc32_math.hpp) run on the host: GF(2) products against zlib's
// crc32_combine, the table updates against each other, and the kernel's span decomposition
// (reference_job_crc) against the library CRC for every size class at unaligned starts.
#include "crc32_math.hpp"
#include "tz/crypto/hash.hpp"

#include "test_bytes.hpp"

#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace {

using namespace tz::cuda::crc;

constexpr std::uint64_t kib = 1024;
constexpr std::uint64_t mib = 1024 * kib;


std::uint32_t library_crc(const std::uint8_t* data, std::size_t size) {
  return tz::crc32(std::as_bytes(std::span(data, size)));
}

std::uint32_t zlib_combine(std::uint32_t a, std::uint32_t b, std::uint64_t len_b) {
  static_assert(sizeof(z_off_t) >= sizeof(std::uint64_t), "zlib offsets must hold any length");
  return static_cast<std::uint32_t>(::crc32_combine(a, b, static_cast<z_off_t>(len_b)));
}

TEST_CASE("multmodp multiplies: 1 is neutral, the product commutes, x^a x^b is x^(a+b)") {
  std::mt19937 gen(1);
  for (int i = 0; i < 200; ++i) {
    const std::uint32_t a = gen(), b = gen();
    CHECK(multmodp(x0, a) == a);
    CHECK(multmodp(a, b) == multmodp(b, a));
    CHECK(multmodp(0, a) == 0);
  }
  CHECK(host_x2k.v[0] == 0x40000000U);  // x
  CHECK(host_x2k.v[4] == 0x00008000U);  // x^16
  CHECK(x8n(host_x2k.v, 0) == x0);
  CHECK(x8n(host_x2k.v, 3) == 0x00000080U);  // x^24
  CHECK(multmodp(x8n(host_x2k.v, 1000), x8n(host_x2k.v, 24)) == x8n(host_x2k.v, 1024));
  // The table reaches bit 63 of a byte count.
  const std::uint64_t top = std::uint64_t{1} << 63;
  CHECK(multmodp(x8n(host_x2k.v, top / 2), x8n(host_x2k.v, top / 2)) == x8n(host_x2k.v, top));
  CHECK(multmodp(x8n(host_x2k.v, top), x8n(host_x2k.v, top - 1)) == x8n(host_x2k.v, ~std::uint64_t{0}));
}

TEST_CASE("multmodp with x8n combines CRCs exactly as zlib's crc32_combine") {
  std::vector<std::uint64_t> lengths = {0, 1, 2, 3, 7, 8, 15, 16, 4095, 4096, 4097, mib, mib + 1,
                                        (std::uint64_t{1} << 32) + 7, std::uint64_t{1} << 40,
                                        (std::uint64_t{1} << 62) + 12345};
  std::mt19937_64 gen(2);
  // Every magnitude zlib takes (its z_off_t is signed: below 2^63).
  for (int i = 0; i < 100; ++i) lengths.push_back(gen() >> (gen() % 63 + 1));
  for (const std::uint64_t len : lengths) {
    CAPTURE(len);
    for (int j = 0; j < 4; ++j) {
      const auto a = static_cast<std::uint32_t>(gen()), b = static_cast<std::uint32_t>(gen());
      CHECK((multmodp(x8n(host_x2k.v, len), a) ^ b) == zlib_combine(a, b, len));
    }
  }
}

TEST_CASE("the byte update gives the standard CRC-32, and slicing-by-8 gives the byte update") {
  const std::uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  CHECK(~update_bytes(host_tables, ~0U, check, sizeof check) == 0xCBF43926U);  // the CRC-32 check value
  CHECK(~update_slice8(host_tables, ~0U, check, sizeof check) == 0xCBF43926U);
  const auto data = tz::test::pattern<std::uint8_t>(4 * kib, 3);
  std::mt19937 gen(3);
  for (std::size_t offset = 0; offset < 8; ++offset) {
    for (std::size_t size : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4000}) {
      CAPTURE(offset);
      CAPTURE(size);
      const std::uint32_t start = gen();
      CHECK(update_slice8(host_tables, start, data.data() + offset, size) ==
            update_bytes(host_tables, start, data.data() + offset, size));
      CHECK(~update_bytes(host_tables, ~0U, data.data() + offset, size) == library_crc(data.data() + offset, size));
    }
  }
}

TEST_CASE("the spans cover a job from its first byte, one thread each, 1 MiB per CTA") {
  CHECK(span_count(0) == 0);
  CHECK(span_count(1) == 1);
  CHECK(span_count(4096) == 1);
  CHECK(span_count(4097) == 2);
  CHECK(ctas_for(0) == 0);
  CHECK(ctas_for(mib) == 1);
  CHECK(ctas_for(mib + 1) == 2);
  for (const std::uint64_t size : {std::uint64_t{1}, std::uint64_t{4095}, 3 * mib + 5}) {
    std::uint64_t next = 0;
    for (std::uint64_t i = 0; i < span_count(size); ++i) {
      const span s = span_at(size, i);
      CHECK(s.offset_bytes == next);
      CHECK(s.size_bytes >= 1);
      CHECK(s.size_bytes <= span_bytes);
      CHECK(s.offset_bytes + s.size_bytes + s.after_bytes == size);
      next = s.offset_bytes + s.size_bytes;
    }
    CHECK(next == size);
  }
}

TEST_CASE("the kernel's decomposition gives the library CRC for every size class at offsets 0..17") {
  constexpr std::size_t offsets = 18;
  const std::uint64_t sizes[] = {0, 1, 7, 15, 16, 17, 4095, 4096, 4097, 8191, mib - 1, mib, mib + 1, 3 * mib + 5};
  const auto buffer = tz::test::pattern<std::uint8_t>(9 * mib + offsets, 4);
  for (const std::uint64_t size : sizes) {
    for (std::size_t offset = 0; offset < offsets; ++offset) {
      CAPTURE(size);
      CAPTURE(offset);
      CHECK(reference_job_crc(buffer.data() + offset, size) == library_crc(buffer.data() + offset, size));
    }
  }
  // Random sizes up to 9 MiB, each at two of the offsets.
  std::mt19937_64 gen(5);
  for (std::size_t i = 0; i < 20; ++i) {
    const std::uint64_t size = gen() % (9 * mib + 1);
    for (const std::size_t offset : {i % offsets, offsets - 1 - i % offsets}) {
      CAPTURE(size);
      CAPTURE(offset);
      CHECK(reference_job_crc(buffer.data() + offset, size) == library_crc(buffer.data() + offset, size));
    }
  }
}

}  // namespace

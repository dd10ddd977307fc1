// CRC-32 over ISA-L (its combine over zlib) and SHA-256 over OpenSSL EVP (SHA-NI where present).
// bench/hash_bench.cpp measured the choices: ISA-L's crc32_gzip_refl about 3x zlib's crc32_z and
// ahead of libdeflate on large buffers; OpenSSL about 5x libsodium's portable SHA-256.
#include "tz/crypto/hash.hpp"

#include <isa-l/crc.h>
#include <openssl/evp.h>
#include <zlib.h>

#include <cassert>

namespace tz {

std::uint32_t crc32_update(std::uint32_t crc, std::span<const std::byte> bytes) noexcept {
  // crc32_gzip_refl chains as zlib's crc32 does (pre- and post-inverted), so values interchange.
  if (bytes.empty()) return crc;
  return ::crc32_gzip_refl(crc, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t len_b) noexcept {
  // zlib's combine is pure GF(2) polynomial arithmetic on the CRC values, so it joins values from
  // any implementation of the same CRC (tests/hash_test.cpp checks it against ours).
  static_assert(sizeof(z_off_t) >= sizeof(std::uint64_t), "zlib offsets must hold any length");
  return static_cast<std::uint32_t>(::crc32_combine(crc_a, crc_b, static_cast<z_off_t>(len_b)));
}

namespace {

// Fetched once: EVP_DigestInit_ex with EVP_sha256() would look the algorithm up in the provider
// tables (under a lock) for every tensor. Never freed: OpenSSL may clean up its providers first.
const EVP_MD* sha256_md() noexcept {
  static const EVP_MD* const md = [] {
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return fetched != nullptr ? fetched : EVP_sha256();
  }();
  return md;
}

}  // namespace

void sha256_hasher::ctx_free::operator()(evp_md_ctx_st* ctx) const noexcept { EVP_MD_CTX_free(ctx); }

sha256_hasher::sha256_hasher() : ctx_(EVP_MD_CTX_new()) { reset(); }

void sha256_hasher::reset() noexcept {
  [[maybe_unused]] const int ok = ctx_ && EVP_DigestInit_ex2(ctx_.get(), sha256_md(), nullptr);
  assert(ok && "OpenSSL SHA-256 init failed");
}

void sha256_hasher::update(std::span<const std::byte> bytes) noexcept {
  if (!bytes.empty()) EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size());
}

sha256_digest sha256_hasher::finish() noexcept {
  sha256_digest out{};
  EVP_DigestFinal_ex(ctx_.get(), out.data(), nullptr);
  return out;
}

sha256_digest sha256(std::span<const std::byte> bytes) noexcept {
  sha256_hasher h;
  h.update(bytes);
  return h.finish();
}

std::uint32_t crc32(std::span<const std::byte> bytes) noexcept { return crc32_update(0, bytes); }

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (auto b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

}  // namespace tz

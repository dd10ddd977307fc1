// Streaming CRC32 and SHA-256 over zlib and OpenSSL EVP.
#include "tz/hash.hpp"

#include <openssl/evp.h>
#include <zlib.h>

#include <cassert>
#include <limits>

namespace tz {

void crc32_hasher::update(std::span<const std::byte> bytes) noexcept {
  const auto* p = reinterpret_cast<const Bytef*>(bytes.data());
  std::size_t n = bytes.size();
  while (n > 0) {
    const auto step = static_cast<uInt>(std::min<std::size_t>(n, std::numeric_limits<uInt>::max() / 2));
    crc_ = static_cast<std::uint32_t>(::crc32_z(crc_, p, step));
    p += step;
    n -= step;
  }
}

struct sha256_hasher::state {
  EVP_MD_CTX* ctx = nullptr;
};

sha256_hasher::sha256_hasher() : state_(std::make_unique<state>()) {
  state_->ctx = EVP_MD_CTX_new();
  [[maybe_unused]] int ok = state_->ctx && EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr);
  assert(ok && "OpenSSL SHA-256 init failed");
}

sha256_hasher::~sha256_hasher() {
  if (state_ && state_->ctx) EVP_MD_CTX_free(state_->ctx);
}

sha256_hasher::sha256_hasher(sha256_hasher&&) noexcept = default;
sha256_hasher& sha256_hasher::operator=(sha256_hasher&& other) noexcept {
  if (this != &other) {
    if (state_ && state_->ctx) EVP_MD_CTX_free(state_->ctx);
    state_ = std::move(other.state_);
  }
  return *this;
}

void sha256_hasher::update(std::span<const std::byte> bytes) noexcept {
  if (!bytes.empty()) EVP_DigestUpdate(state_->ctx, bytes.data(), bytes.size());
}

sha256_digest sha256_hasher::finish() noexcept {
  sha256_digest out{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(state_->ctx, out.data(), &len);
  return out;
}

sha256_digest sha256(std::span<const std::byte> bytes) noexcept {
  sha256_hasher h;
  h.update(bytes);
  return h.finish();
}

std::uint32_t crc32(std::span<const std::byte> bytes) noexcept {
  crc32_hasher h;
  h.update(bytes);
  return h.value();
}

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

std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t length_b) noexcept {
  return static_cast<std::uint32_t>(::crc32_combine64(crc_a, crc_b, static_cast<z_off64_t>(length_b)));
}

}  // namespace tz

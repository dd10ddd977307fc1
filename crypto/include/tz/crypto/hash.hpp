// CRC-32 and SHA-256, the two hashes of the .tensors format, in pieces that threads can share.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX

namespace tz {

using sha256_digest = std::array<std::uint8_t, 32>;

// CRC-32 (IEEE 802.3, reflected 0xEDB88320, as zlib.crc32) of `bytes` continued from `crc`, the
// CRC-32 of what came before (0 for nothing): crc32_update(crc32_update(0, a), b) == crc32(a || b).
std::uint32_t crc32_update(std::uint32_t crc, std::span<const std::byte> bytes) noexcept;

// The CRC-32 of a || b from crc_a = CRC-32 of a, crc_b = CRC-32 of b and len_b = b's length in
// bytes: lets threads hash pieces of one tensor and join them in file order. Reads no data; its cost
// grows with log(len_b) only (hash_bench measures it).
std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t len_b) noexcept;

// crc32_update with the running value kept.
class crc32_hasher {
 public:
  void update(std::span<const std::byte> bytes) noexcept { crc_ = crc32_update(crc_, bytes); }
  std::uint32_t value() const noexcept { return crc_; }

 private:
  std::uint32_t crc_ = 0;
};

// SHA-256 fed in pieces, in order. Cheap enough to make one per tensor (one small allocation; the
// algorithm is looked up once per process). finish() ends a message; reset() starts a new one on
// the same object. A moved-from hasher may only be assigned to or destroyed.
class sha256_hasher {
 public:
  sha256_hasher();
  void update(std::span<const std::byte> bytes) noexcept;
  sha256_digest finish() noexcept;
  void reset() noexcept;

 private:
  struct ctx_free {
    void operator()(evp_md_ctx_st* ctx) const noexcept;
  };
  std::unique_ptr<evp_md_ctx_st, ctx_free> ctx_;
};

sha256_digest sha256(std::span<const std::byte> bytes) noexcept;
std::uint32_t crc32(std::span<const std::byte> bytes) noexcept;

// Lower-case hex of any byte string.
std::string to_hex(std::span<const std::uint8_t> bytes);

}  // namespace tz

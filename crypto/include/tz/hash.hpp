// Streaming CRC32 (zlib) and SHA-256 (OpenSSL): the two hashes of the .tensors format.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace tz {

using sha256_digest = std::array<std::uint8_t, 32>;

// CRC-32 (IEEE 802.3, reflected 0xEDB88320, as zlib.crc32), fed in pieces.
class crc32_hasher {
 public:
  void update(std::span<const std::byte> bytes) noexcept;
  std::uint32_t value() const noexcept { return crc_; }

 private:
  std::uint32_t crc_ = 0;
};

// SHA-256 fed in pieces; finish() may be called once.
class sha256_hasher {
 public:
  sha256_hasher();
  ~sha256_hasher();
  sha256_hasher(sha256_hasher&&) noexcept;
  sha256_hasher& operator=(sha256_hasher&&) noexcept;
  void update(std::span<const std::byte> bytes) noexcept;
  sha256_digest finish() noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

sha256_digest sha256(std::span<const std::byte> bytes) noexcept;
std::uint32_t crc32(std::span<const std::byte> bytes) noexcept;
// The CRC-32 of A followed by B, from crc32(A), crc32(B) and B's length: lets pieces of one
// stream be hashed on different threads (zlib's crc32_combine).
std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t length_b) noexcept;

// Lower-case hex of any byte string.
std::string to_hex(std::span<const std::uint8_t> bytes);

}  // namespace tz

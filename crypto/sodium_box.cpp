// Nonce arithmetic, chunk layout and chunked detached XSalsa20-Poly1305 (format/FORMAT.md §9.3, §9.4).
#include "tz/crypto/sodium.hpp"

#include <sodium.h>

#include <cassert>
#include <string>

namespace tz::crypto {

nonce random_nonce() {
  (void)initialize();  // randombytes works uninitialized too; this only picks the best source early
  nonce value{};
  randombytes_buf(value.data(), value.size());
  return value;
}

nonce increment_nonce(const nonce& value, std::uint64_t n) noexcept {
  // Schoolbook addition of n, little-endian, byte by byte; the final carry out is dropped, which is
  // the wrap-around of sodium_increment.
  nonce out = value;
  unsigned carry = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const unsigned addend = i < sizeof(n) ? static_cast<unsigned>((n >> (8 * i)) & 0xffU) : 0U;
    const unsigned sum = out[i] + addend + carry;
    out[i] = static_cast<std::uint8_t>(sum & 0xffU);
    carry = sum >> 8;
  }
  return out;
}

// ---- chunk_layout -------------------------------------------------------------------------

std::uint64_t chunk_layout::count() const noexcept {
  assert(chunk_size_bytes > 0);
  // Written without data_length + chunk_size - 1, which would overflow near 2^64.
  return data_length_bytes / chunk_size_bytes + (data_length_bytes % chunk_size_bytes != 0 ? 1 : 0);
}

byte_range chunk_layout::range(std::uint64_t index) const noexcept {
  return range(chunk_range{index, index + 1});
}

byte_range chunk_layout::range(chunk_range chunks) const noexcept {
  assert(chunks.first <= chunks.end && chunks.end <= count());
  if (chunks.first == chunks.end) return {};
  const std::uint64_t begin = chunks.first * chunk_size_bytes;
  // Only the last chunk of the tensor can be short; clamp to the data's end.
  const std::uint64_t end = chunks.end == count() ? data_length_bytes : chunks.end * chunk_size_bytes;
  return byte_range{begin, end - begin};
}

result<void> validate(const chunk_layout& layout, std::uint64_t mac_count) {
  if (layout.chunk_size_bytes < 1024 || layout.chunk_size_bytes % 64 != 0) {
    return make_error(errc::format, "encryption chunk_size " + std::to_string(layout.chunk_size_bytes) +
                                        " is invalid: expected a multiple of 64 that is at least 1024");
  }
  if (mac_count != layout.count()) {
    return make_error(errc::format, "encrypted data of " + std::to_string(layout.data_length_bytes) +
                                        " bytes in chunks of " + std::to_string(layout.chunk_size_bytes) +
                                        " needs " + std::to_string(layout.count()) + " MACs, the header has " +
                                        std::to_string(mac_count));
  }
  return {};
}

// ---- single chunks ------------------------------------------------------------------------

mac seal_chunk(std::span<std::byte> bytes, const nonce& chunk_nonce, const secret_key& key) noexcept {
  auto* data = reinterpret_cast<unsigned char*>(bytes.data());
  mac tag{};
  // In place (c == m) is explicitly supported by crypto_secretbox_detached; it cannot fail for
  // lengths below crypto_secretbox_MESSAGEBYTES_MAX (2^64 - 1 - 32 on 64-bit hosts).
  (void)crypto_secretbox_detached(data, tag.data(), data, bytes.size(), chunk_nonce.data(), key.bytes().data());
  return tag;
}

bool open_chunk(std::span<std::byte> bytes, const nonce& chunk_nonce, const secret_key& key,
                const mac& tag) noexcept {
  auto* data = reinterpret_cast<unsigned char*>(bytes.data());
  // libsodium verifies the MAC before it writes a single byte, so a failure leaves bytes intact.
  return crypto_secretbox_open_detached(data, data, tag.data(), bytes.size(), chunk_nonce.data(),
                                        key.bytes().data()) == 0;
}

// ---- ranges of chunks ---------------------------------------------------------------------

namespace {

// Checks that `chunks` lies inside the layout, that bytes is exactly those chunks and that the
// MAC array covers the whole tensor; returns the chunks' byte range within the tensor.
result<byte_range> check_chunk_span(std::size_t bytes_size, const chunk_layout& layout, chunk_range chunks,
                                    std::size_t mac_count) {
  if (layout.chunk_size_bytes == 0) return make_error(errc::invalid_argument, "encryption chunk_size is 0");
  const std::uint64_t count = layout.count();
  if (chunks.first > chunks.end || chunks.end > count) {
    return make_error(errc::invalid_argument, "chunk range [" + std::to_string(chunks.first) + ", " +
                                                  std::to_string(chunks.end) + ") is outside the tensor's " +
                                                  std::to_string(count) + " chunks");
  }
  if (mac_count != count) {
    return make_error(errc::invalid_argument, "expected " + std::to_string(count) + " MACs for the tensor, got " +
                                                  std::to_string(mac_count));
  }
  const byte_range range = layout.range(chunks);
  if (bytes_size != range.size_bytes) {
    return make_error(errc::invalid_argument, "chunks [" + std::to_string(chunks.first) + ", " +
                                                  std::to_string(chunks.end) + ") span " +
                                                  std::to_string(range.size_bytes) + " bytes, the buffer has " +
                                                  std::to_string(bytes_size));
  }
  return range;
}

}  // namespace

result<void> seal_chunks(std::span<std::byte> bytes, const chunk_layout& layout, chunk_range chunks,
                         const secret_key& key, const nonce& initial_nonce, std::span<mac> macs) {
  TZ_TRY(span_range, check_chunk_span(bytes.size(), layout, chunks, macs.size()));
  nonce chunk_nonce = increment_nonce(initial_nonce, chunks.first);
  for (std::uint64_t i = chunks.first; i < chunks.end; ++i) {
    const byte_range chunk = layout.range(i);
    macs[i] = seal_chunk(bytes.subspan(chunk.offset_bytes - span_range.offset_bytes, chunk.size_bytes),
                         chunk_nonce, key);
    chunk_nonce = increment_nonce(chunk_nonce, 1);
  }
  return {};
}

result<void> open_chunks(std::span<std::byte> bytes, const chunk_layout& layout, chunk_range chunks,
                         const secret_key& key, const nonce& initial_nonce, std::span<const mac> macs,
                         std::uint64_t* first_bad_chunk) {
  TZ_CHECK(validate(layout, macs.size()));
  TZ_TRY(span_range, check_chunk_span(bytes.size(), layout, chunks, macs.size()));
  nonce chunk_nonce = increment_nonce(initial_nonce, chunks.first);
  for (std::uint64_t i = chunks.first; i < chunks.end; ++i) {
    const byte_range chunk = layout.range(i);
    const auto piece = bytes.subspan(chunk.offset_bytes - span_range.offset_bytes, chunk.size_bytes);
    if (!open_chunk(piece, chunk_nonce, key, macs[i])) {
      if (first_bad_chunk != nullptr) *first_bad_chunk = i;
      return make_error(errc::crypto, mac_mismatch_message(layout, i));
    }
    chunk_nonce = increment_nonce(chunk_nonce, 1);
  }
  return {};
}

// ---- whole tensors ------------------------------------------------------------------------

std::vector<mac> seal_tensor(std::span<std::byte> data, const secret_key& key, const nonce& initial_nonce,
                             std::uint64_t chunk_size_bytes) {
  assert(chunk_size_bytes > 0);
  const chunk_layout layout{data.size(), chunk_size_bytes};
  std::vector<mac> macs(layout.count());
  const auto sealed = seal_chunks(data, layout, chunk_range{0, layout.count()}, key, initial_nonce, macs);
  assert(sealed);  // the spans were built from the layout, so they always match
  (void)sealed;
  return macs;
}

result<void> open_tensor(std::span<std::byte> data, const secret_key& key, const nonce& initial_nonce,
                         std::span<const mac> macs, std::uint64_t* first_bad_chunk, std::uint64_t chunk_size_bytes) {
  const chunk_layout layout{data.size(), chunk_size_bytes};
  TZ_CHECK(validate(layout, macs.size()));
  return open_chunks(data, layout, chunk_range{0, layout.count()}, key, initial_nonce, macs, first_bad_chunk);
}

std::string mac_mismatch_message(const chunk_layout& layout, std::uint64_t index) {
  const byte_range chunk = layout.range(index);
  return "Tensor decryption failed: MAC doesn't match data in chunk " + std::to_string(index) + " of " +
         std::to_string(layout.count()) + " (bytes " + std::to_string(chunk.offset_bytes) + ".." +
         std::to_string(chunk.offset_bytes + chunk.size_bytes) + " of " + std::to_string(layout.data_length_bytes) +
         "): wrong key, or corrupted data, MAC or nonce";
}

}  // namespace tz::crypto

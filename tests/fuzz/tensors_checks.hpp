// Invariants of parsed .tensors structures shared by the .tensors harnesses: what a successful parse
// promises about the bytes it came from, and the byte-exact round trips the format allows.
#pragma once

#include "fuzz_support.hpp"
#include "tz/format/encryption.hpp"
#include "tz/format/tensorizer.hpp"
#include "tz/format/writer.hpp"

#include <algorithm>
#include <cstring>

namespace tz::fuzz {

// The 73-byte prefix round trip: every field is stored verbatim except the 8 reserved bytes at
// offset 49 (read and ignored; the writer stores zeros) and the 31 feature-flag bytes after the
// first (must be zero to parse).
inline void check_file_header_round_trip(const format::file_header& h, std::span<const std::byte> prefix) {
  auto encoded = format::encode_file_header(h);
  require(encoded.size() == format::file_prefix_bytes, "encoded prefix is 73 bytes");
  std::vector<std::byte> input(prefix.begin(), prefix.begin() + format::file_prefix_bytes);
  std::fill_n(input.begin() + 49, 8, std::byte{0});
  require(encoded == input, "file header re-encodes to its bytes (reserved zeroed)");
}

inline bool same_crypt(const format::crypt_info& a, const format::crypt_info& b) {
  if (a.kdf.has_value() != b.kdf.has_value() || a.cipher.has_value() != b.cipher.has_value()) return false;
  if (a.kdf && (a.kdf->opslimit != b.kdf->opslimit || a.kdf->memlimit != b.kdf->memlimit || a.kdf->alg != b.kdf->alg ||
                a.kdf->salt != b.kdf->salt))
    return false;
  if (a.cipher && (a.cipher->sequential != b.cipher->sequential || a.cipher->chunk_bytes != b.cipher->chunk_bytes ||
                   a.cipher->nonce != b.cipher->nonce || a.cipher->macs != b.cipher->macs))
    return false;
  return true;
}

// The crypt-info round trip. The block may carry slack the parser skips (a chunk longer than its
// fields, bytes after the last chunk, a repeated KDF chunk of which the last wins) and its chunks
// in either order, so: the canonical encoding always parses back to the same info, and equals the
// input bytes whenever it has the input's length and the input puts a KDF chunk first or has one chunk.
inline void check_crypt_round_trip(const format::crypt_info& info, std::span<const std::byte> body) {
  const auto encoded = format::encode_crypt_info(info);
  auto again = format::parse_crypt_info(encoded, 0, "fuzz re-encoded");
  require(again.has_value(), "re-encoded crypt-info parses");
  require(same_crypt(*again, info), "re-encoded crypt-info parses to the same info");
  require(encoded.size() <= body.size(), "canonical crypt-info is no longer than the input");
  const bool one_chunk = !(info.kdf && info.cipher);
  const bool kdf_first = body.size() >= 12 && le(body, 10, 2) == 1;
  if (encoded.size() == body.size() && (one_chunk || kdf_first))
    require(std::equal(encoded.begin(), encoded.end(), body.begin()), "slack-free crypt-info re-encodes to its bytes");
}

// What parse_tensor_header promises about the header bytes it accepted.
inline void check_tensor_header(const format::tensor_header& h, std::span<const std::byte> bytes,
                                const format::file_header& fh, const format::tensor_entry& e) {
  require(h.header_bytes == bytes.size(), "header_size equals the header span");
  require(h.name == e.name && h.shape == e.shape && h.dtype.stored == e.dtype.stored, "header agrees with its entry");
  require(h.data_length == e.data_length && le(bytes, bytes.size() - 8, 8) == h.data_length, "data_length is the last u64");
  for (const auto& sh : h.hashes) {
    require(sh.value_offset + sh.value.size() <= bytes.size(), "hash value inside the header");
    require(std::memcmp(bytes.data() + sh.value_offset, sh.value.data(), sh.value.size()) == 0, "hash value is the stored bytes");
  }
  require(h.crypt_begin <= h.crypt_end && h.crypt_end <= bytes.size(), "crypt block inside the header");
  if (h.crypt && h.crypt->cipher && !h.crypt->cipher->sequential && h.data_length > 0) {
    const auto& x = *h.crypt->cipher;
    require(x.macs.size() == h.data_length / x.chunk_bytes + (h.data_length % x.chunk_bytes != 0),
            "one MAC per chunk of the data");
  }
  require(h.hash_prefix.size() == bytes.size() - (h.crypt_end - h.crypt_begin), "H is the header less its crypt block");
  if (fh.has_crypt_info() && h.crypt_end > h.crypt_begin) {
    const auto body = bytes.subspan(h.crypt_begin + 8, h.crypt_end - h.crypt_begin - 8);
    auto info = format::parse_crypt_info(body, 0, "fuzz");
    require(info.has_value(), "the accepted crypt block parses alone");
    check_crypt_round_trip(*info, body);
  }
}

// Decrypts a consistent tensor's (small) data with a fixed key: a MAC failure is an error, never a crash.
inline void try_decrypt(const format::tensor_header& h, std::span<const std::byte> data) {
  if (!h.crypt || !h.crypt->cipher || data.size() != h.data_length || h.data_length > (1u << 16)) return;
  static const auto decryption =
      format::decryption::from_key(unwrap(crypto::secret_key::from_bytes(std::vector<std::uint8_t>(32, 7))));
  std::vector<std::byte> copy(data.begin(), data.end());
  auto r = format::decrypt_tensor(h, copy, decryption, "fuzz");
  require(r.has_value() || r.error().code == errc::crypto, "decryption fails only with errc::crypto");
}

}  // namespace tz::fuzz

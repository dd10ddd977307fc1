// tensorizer encryption on the .tensors layout: decrypting tensors of v3 / v4+flag files and the
// writer's encryptor (XSalsa20-Poly1305 in 2 MiB chunks, format/FORMAT.md §9), over tz/sodium.hpp.
#pragma once

#include "tz/format/tensorizer.hpp"
#include "tz/format/writer.hpp"
#include "tz/crypto/sodium.hpp"

#include <memory>
#include <optional>
#include <set>

namespace tz::format {

// How to decrypt a file: an exact 32-byte key, or a passphrase whose key is derived (Argon2id,
// cached) from each header's key-derivation chunk. Thread-safe; shared by all readers of a load.
class decryption {
 public:
  static decryption from_key(crypto::secret_key key);
  static decryption from_passphrase(crypto::passphrase pass);

  // The key that opens this tensor. errc::crypto when a passphrase is given but the tensor has
  // no key-derivation chunk, or its algorithm is not Argon2id.
  result<std::shared_ptr<const crypto::secret_key>> key_for(const tensor_header& h, std::string_view source) const;

 private:
  std::shared_ptr<const crypto::secret_key> key_;
  std::shared_ptr<const crypto::passphrase> pass_;
  std::shared_ptr<crypto::key_cache> cache_;
};

// The file-level checks of format/FORMAT.md §3.1: an encrypted file needs decryption, and decryption
// needs an encrypted file (v3, or v4+ with flag bit 0). errc::crypto naming the source.
result<void> check_decryption_mode(const file_header& fh, bool have_decryption, std::string_view source);

// Decrypts chunks [chunks.first, chunks.end) of a tensor in place; `bytes` holds exactly those
// chunks. A type-3 (sequential) tensor has one chunk covering all data. errc::crypto naming the
// tensor and the first chunk whose MAC fails.
result<void> decrypt_chunks(const tensor_header& h, std::span<std::byte> bytes, crypto::chunk_range chunks,
                            const crypto::secret_key& key, std::string_view source);

// Number of independently decryptable chunks of a tensor (0 for data-less tensors).
std::uint64_t cipher_chunk_count(const tensor_header& h) noexcept;
// Chunk size of a tensor (its data length for a sequential tensor).
std::uint64_t cipher_chunk_bytes(const tensor_header& h) noexcept;

// One cipher chunk of a tensor's data: where it lies, the nonce it was sealed with, its MAC. For
// callers that open chunks elsewhere (the device sink's kernels) and report as decrypt_chunks does.
struct cipher_chunk_ref {
  std::uint64_t index = 0;
  std::uint64_t offset_bytes = 0;  // in the tensor's data
  std::uint64_t size_bytes = 0;
  crypto::nonce nonce{};
  crypto::mac mac{};
};

// Chunks [chunks.first, chunks.end) of tensor h (a sequential tensor: its one chunk, index 0).
// Precondition: h is encrypted and the range lies within cipher_chunk_count(h).
std::vector<cipher_chunk_ref> cipher_chunks(const tensor_header& h, crypto::chunk_range chunks);

// The error decrypt_chunks reports when chunk `index` of tensor h fails its MAC.
error chunk_mac_error(const tensor_header& h, std::uint64_t index, std::string_view source);

// Decrypts a whole tensor in place.
result<void> decrypt_tensor(const tensor_header& h, std::span<std::byte> data, const decryption& d,
                            std::string_view source);

// Encodes a crypt-info body as tensorizer 2.11.1 writes it: the key-derivation chunk (when present)
// before the cipher chunk, each chunk exactly as long as its fields. parse_crypt_info's inverse for
// every body in that layout.
std::vector<std::byte> encode_crypt_info(const crypt_info& info);

// Encrypts tensors the way tensorizer 2.11.1's writer does: a fresh random initial nonce per
// tensor, chunk i sealed with nonce+i, an optional PWHash chunk before the cipher chunk.
class tensorizer_encryptor final : public tensor_encryptor {
 public:
  static tensorizer_encryptor from_key(crypto::secret_key key);
  // Derives the key once (blocking) with a fresh random salt unless params.salt is set by the caller.
  static result<tensorizer_encryptor> from_passphrase(const crypto::passphrase& pass, crypto::kdf_params params);
  // An already derived passphrase key and the parameters it was derived with (stored in every
  // header's KDF chunk), so several files can share one Argon2id derivation.
  static tensorizer_encryptor from_derived_key(crypto::secret_key key, crypto::kdf_params params);

  result<std::vector<std::byte>> encrypt(std::span<std::byte> data) override;
  std::uint64_t crypt_info_bytes(std::uint64_t data_bytes) const override;

 private:
  tensorizer_encryptor(crypto::secret_key key, std::optional<crypto::kdf_params> kdf)
      : key_(std::move(key)), kdf_(kdf) {}
  crypto::secret_key key_;
  std::optional<crypto::kdf_params> kdf_;
  std::set<crypto::nonce> used_nonces_;  // every chunk nonce used in this file, to refuse reuse
};

}  // namespace tz::format

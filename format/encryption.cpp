// Decrypting and encrypting tensor data on the .tensors layout (format/FORMAT.md §9).
#include "tz/format/encryption.hpp"

namespace tz::format {
namespace {

error crypto_error(std::string_view source, const std::string& what) {
  return make_error(errc::crypto, std::string(source) + ": " + what);
}

void put(std::vector<std::byte>& out, std::uint64_t v, std::size_t width) {
  for (std::size_t i = 0; i < width; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

template <class Bytes>
void put_raw(std::vector<std::byte>& out, const Bytes& b) {
  for (auto x : b) out.push_back(static_cast<std::byte>(x));
}

}  // namespace

decryption decryption::from_key(crypto::secret_key key) {
  decryption d;
  d.key_ = std::make_shared<const crypto::secret_key>(std::move(key));
  return d;
}

decryption decryption::from_passphrase(crypto::passphrase pass) {
  decryption d;
  d.pass_ = std::make_shared<const crypto::passphrase>(std::move(pass));
  d.cache_ = std::make_shared<crypto::key_cache>();
  return d;
}

result<std::shared_ptr<const crypto::secret_key>> decryption::key_for(const tensor_header& h,
                                                                      std::string_view source) const {
  if (key_) return key_;
  if (!h.crypt || !h.crypt->kdf)
    return crypto_error(source, "tensor '" + h.name + "': a passphrase was given, but the tensor was not encrypted "
                                "with a passphrase; open it with its exact key instead (DecryptionParams.from_key, --decrypt-key-file)");
  const auto& k = *h.crypt->kdf;
  if (k.alg != crypto::alg_argon2id13)
    return crypto_error(source, "tensor '" + h.name + "': unsupported pwhash algorithm " + std::to_string(k.alg));
  crypto::kdf_params params{k.opslimit, k.memlimit, k.alg, {}};
  std::copy(k.salt.begin(), k.salt.end(), params.salt.begin());
  auto key = cache_->derive(*pass_, params);
  if (!key) return crypto_error(source, "tensor '" + h.name + "': " + key.error().message);
  return *key;
}

result<void> check_decryption_mode(const file_header& fh, bool have_decryption, std::string_view source) {
  if (fh.has_crypt_info() && !have_decryption)
    return crypto_error(source, "the file is encrypted, but no decryption key or passphrase was given");
  if (!have_decryption) return {};
  if (fh.version < 3)
    return crypto_error(source, "decryption was requested, but the file (data version " + std::to_string(fh.version) +
                                    ") predates encryption");
  if (!fh.has_crypt_info())
    return crypto_error(source, "decryption was requested, but the file is not flagged as encrypted");
  return {};
}

std::uint64_t cipher_chunk_count(const tensor_header& h) noexcept {
  if (h.data_length == 0 || !h.crypt || !h.crypt->cipher) return 0;
  return h.crypt->cipher->sequential ? 1 : h.crypt->cipher->macs.size();
}

std::uint64_t cipher_chunk_bytes(const tensor_header& h) noexcept {
  if (!h.crypt || !h.crypt->cipher || h.crypt->cipher->sequential) return std::max<std::uint64_t>(h.data_length, 1);
  return h.crypt->cipher->chunk_bytes;
}

result<void> decrypt_chunks(const tensor_header& h, std::span<std::byte> bytes, crypto::chunk_range chunks,
                            const crypto::secret_key& key, std::string_view source) {
  if (chunks.first == chunks.end) return {};
  if (!h.crypt || !h.crypt->cipher)
    return crypto_error(source, "tensor '" + h.name + "' is not encrypted, but decryption was requested");
  const auto& x = *h.crypt->cipher;
  crypto::nonce initial{};
  std::copy(x.nonce.begin(), x.nonce.end(), initial.begin());
  std::vector<crypto::mac> macs(x.macs.size());
  for (std::size_t i = 0; i < macs.size(); ++i) std::copy(x.macs[i].begin(), x.macs[i].end(), macs[i].begin());
  if (x.sequential) {
    if (!crypto::open_chunk(bytes, initial, key, macs.at(0))) return chunk_mac_error(h, 0, source);
    return {};
  }
  const crypto::chunk_layout layout{h.data_length, x.chunk_bytes};
  std::uint64_t bad = 0;
  auto r = crypto::open_chunks(bytes, layout, chunks, key, initial, macs, &bad);
  if (!r) return crypto_error(source, "tensor '" + h.name + "': " + r.error().message);
  return {};
}

std::vector<cipher_chunk_ref> cipher_chunks(const tensor_header& h, crypto::chunk_range chunks) {
  const auto& x = *h.crypt->cipher;
  crypto::nonce initial{};
  std::copy(x.nonce.begin(), x.nonce.end(), initial.begin());
  const crypto::chunk_layout layout{h.data_length, x.sequential ? std::max<std::uint64_t>(h.data_length, 1) : x.chunk_bytes};
  std::vector<cipher_chunk_ref> out;
  out.reserve(chunks.end - chunks.first);
  crypto::nonce n = crypto::increment_nonce(initial, chunks.first);
  for (std::uint64_t i = chunks.first; i < chunks.end; ++i) {
    const auto r = layout.range(i);
    cipher_chunk_ref c{i, r.offset_bytes, r.size_bytes, n, {}};
    std::copy(x.macs.at(i).begin(), x.macs.at(i).end(), c.mac.begin());
    out.push_back(c);
    n = crypto::increment_nonce(n, 1);
  }
  return out;
}

error chunk_mac_error(const tensor_header& h, std::uint64_t index, std::string_view source) {
  const auto& x = *h.crypt->cipher;
  if (x.sequential) return crypto_error(source, "tensor '" + h.name + "': decryption failed (MAC mismatch over the whole data)");
  return crypto_error(source, "tensor '" + h.name + "': " +
                                  crypto::mac_mismatch_message(crypto::chunk_layout{h.data_length, x.chunk_bytes}, index));
}

result<void> decrypt_tensor(const tensor_header& h, std::span<std::byte> data, const decryption& d,
                            std::string_view source) {
  const auto n = cipher_chunk_count(h);
  if (n == 0) {
    if (h.data_length > 0)
      return crypto_error(source, "tensor '" + h.name + "' is not encrypted, but decryption was requested");
    return {};
  }
  TZ_TRY(key, d.key_for(h, source));
  return decrypt_chunks(h, data, {0, n}, *key, source);
}

std::vector<std::byte> encode_crypt_info(const crypt_info& info) {
  std::vector<std::byte> body;
  put(body, (info.kdf ? 1 : 0) + (info.cipher ? 1 : 0), 2);
  if (info.kdf) {
    const auto& k = *info.kdf;
    put(body, 2 + 2 + 8 + 8 + 4 + 2 + k.salt.size(), 8), put(body, 1, 2), put(body, 1, 2);
    put(body, k.opslimit, 8), put(body, k.memlimit, 8);
    put(body, static_cast<std::uint32_t>(k.alg), 4), put(body, k.salt.size(), 2);
    put_raw(body, k.salt);
  }
  if (info.cipher) {
    const auto& x = *info.cipher;
    put(body, 2 + (x.sequential ? 0 : 16) + 24 + 16 * x.macs.size(), 8), put(body, x.sequential ? 3 : 2, 2);
    if (!x.sequential) put(body, x.chunk_bytes, 8);
    put_raw(body, x.nonce);
    if (!x.sequential) put(body, x.macs.size(), 8);
    for (const auto& m : x.macs) put_raw(body, m);
  }
  return body;
}

tensorizer_encryptor tensorizer_encryptor::from_key(crypto::secret_key key) {
  return tensorizer_encryptor(std::move(key), std::nullopt);
}

tensorizer_encryptor tensorizer_encryptor::from_derived_key(crypto::secret_key key, crypto::kdf_params params) {
  return tensorizer_encryptor(std::move(key), params);
}

result<tensorizer_encryptor> tensorizer_encryptor::from_passphrase(const crypto::passphrase& pass,
                                                                   crypto::kdf_params params) {
  TZ_TRY(key, crypto::derive_key(pass, params));
  return tensorizer_encryptor(std::move(key), params);
}

std::uint64_t tensorizer_encryptor::crypt_info_bytes(std::uint64_t data_bytes) const {
  const std::uint64_t macs = (data_bytes + crypto::chunk_size_bytes - 1) / crypto::chunk_size_bytes;
  return 2 + (kdf_ ? 8 + 42 : 0) + 8 + 42 + 16 * macs;
}

result<std::vector<std::byte>> tensorizer_encryptor::encrypt(std::span<std::byte> data) {
  crypto::nonce initial = crypto::random_nonce();
  const std::uint64_t chunks = (data.size() + crypto::chunk_size_bytes - 1) / crypto::chunk_size_bytes;
  // Refuse overlapping nonce ranges: every chunk nonce in a file must be unique.
  for (std::uint64_t i = 0; i < chunks; ++i)
    if (used_nonces_.count(crypto::increment_nonce(initial, i)))
      return make_error(errc::crypto, "illegal nonce reuse while encrypting");
  for (std::uint64_t i = 0; i < chunks; ++i) used_nonces_.insert(crypto::increment_nonce(initial, i));
  const auto macs = crypto::seal_tensor(data, key_, initial);
  crypt_info info;
  if (kdf_) info.kdf = kdf_chunk{kdf_->opslimit, kdf_->memlimit_bytes, kdf_->alg,
                                 std::vector<std::uint8_t>(kdf_->salt.begin(), kdf_->salt.end())};
  auto& x = info.cipher.emplace();
  x.chunk_bytes = crypto::chunk_size_bytes;
  std::copy(initial.begin(), initial.end(), x.nonce.begin());
  for (const auto& m : macs) std::copy(m.begin(), m.end(), x.macs.emplace_back().begin());
  return encode_crypt_info(info);
}

}  // namespace tz::format

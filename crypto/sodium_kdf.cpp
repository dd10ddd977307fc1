// Argon2id key derivation (crypto_pwhash) and the per-caller cache of derived keys.
#include "tz/crypto/sodium.hpp"

#include <sodium.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace tz::crypto {

// The constants in the header are tensorizer's view of libsodium 1.0.18; fail the build if the
// libsodium we compile against disagrees, rather than write files other readers cannot open.
// memlimit_bytes is passed to crypto_pwhash as a size_t; the range in the header assumes 64 bits.
static_assert(sizeof(std::size_t) == 8, "tz::crypto assumes a 64-bit host");
static_assert(crypto_secretbox_KEYBYTES == key_size_bytes);
static_assert(crypto_secretbox_NONCEBYTES == nonce_size_bytes);
static_assert(crypto_secretbox_MACBYTES == mac_size_bytes);
static_assert(crypto_pwhash_SALTBYTES == salt_size_bytes);
static_assert(crypto_pwhash_ALG_ARGON2ID13 == alg_argon2id13);
static_assert(crypto_pwhash_OPSLIMIT_MIN == kdf_min.opslimit);
static_assert(crypto_pwhash_MEMLIMIT_MIN == kdf_min.memlimit_bytes);
static_assert(crypto_pwhash_OPSLIMIT_INTERACTIVE == kdf_interactive.opslimit);
static_assert(crypto_pwhash_MEMLIMIT_INTERACTIVE == kdf_interactive.memlimit_bytes);
static_assert(crypto_pwhash_OPSLIMIT_MODERATE == kdf_moderate.opslimit);
static_assert(crypto_pwhash_MEMLIMIT_MODERATE == kdf_moderate.memlimit_bytes);
static_assert(crypto_pwhash_OPSLIMIT_SENSITIVE == kdf_sensitive.opslimit);
static_assert(crypto_pwhash_MEMLIMIT_SENSITIVE == kdf_sensitive.memlimit_bytes);

namespace {

error out_of_range(const char* field, std::uint64_t value, const char* bound_name, std::uint64_t bound) {
  return make_error(errc::invalid_argument, std::string("Argon2id ") + field + " " + std::to_string(value) +
                                                " is outside the allowed range (" + bound_name + " " +
                                                std::to_string(bound) + ")");
}

}  // namespace

result<void> validate(const kdf_params& params, const kdf_limits& limits) {
  if (params.alg != alg_argon2id13) {
    return make_error(errc::unsupported, "Unsupported pwhash algorithm (" + std::to_string(params.alg) +
                                             "), expected " + std::to_string(alg_argon2id13) + " (Argon2id13)");
  }
  if (params.opslimit < opslimit_min) return out_of_range("opslimit", params.opslimit, "min", opslimit_min);
  if (params.opslimit > opslimit_max) return out_of_range("opslimit", params.opslimit, "max", opslimit_max);
  if (params.memlimit_bytes < memlimit_min_bytes) {
    return out_of_range("memlimit_bytes", params.memlimit_bytes, "min", memlimit_min_bytes);
  }
  if (params.memlimit_bytes > memlimit_max_bytes) {
    return out_of_range("memlimit_bytes", params.memlimit_bytes, "max", memlimit_max_bytes);
  }
  if (params.opslimit > limits.opslimit_max) {
    return out_of_range("opslimit", params.opslimit, "this reader's kdf_limits.opslimit_max", limits.opslimit_max);
  }
  if (params.memlimit_bytes > limits.memlimit_max_bytes) {
    return out_of_range("memlimit_bytes", params.memlimit_bytes, "this reader's kdf_limits.memlimit_max_bytes",
                        limits.memlimit_max_bytes);
  }
  return {};
}

kdf_salt random_salt() {
  (void)initialize();  // randombytes works uninitialized too; this only picks the best source early
  kdf_salt salt{};
  randombytes_buf(salt.data(), salt.size());
  return salt;
}

result<secret_key> derive_key(const passphrase& pass, const kdf_params& params, const kdf_limits& limits) {
  TZ_CHECK(validate(params, limits));
  // Derive straight into guarded memory so the key never sits in ordinary heap or stack.
  TZ_TRY(buffer, detail::guarded_buffer::allocate(key_size_bytes));
  const auto bytes = pass.bytes();
  const int rc = crypto_pwhash(buffer.data(), key_size_bytes, reinterpret_cast<const char*>(bytes.data()),
                               bytes.size(), params.salt.data(), params.opslimit,
                               static_cast<std::size_t>(params.memlimit_bytes), params.alg);
  if (rc != 0) {
    return make_error(errc::crypto, "Argon2id key derivation failed (opslimit " + std::to_string(params.opslimit) +
                                        ", memlimit " + std::to_string(params.memlimit_bytes) +
                                        " bytes): libsodium could not allocate the memory");
  }
  buffer.seal_read_only();
  auto key = secret_key::from_bytes(std::span<const std::uint8_t>(buffer.data(), key_size_bytes));
  return key;
}

// ---- key_cache ----------------------------------------------------------------------------

namespace {

using passphrase_id = std::array<std::uint8_t, crypto_generichash_BYTES>;
using cache_key = std::tuple<passphrase_id, std::uint64_t, std::uint64_t, std::int32_t, kdf_salt>;

}  // namespace

struct key_cache::state {
  kdf_limits limits;
  // Keys the passphrase hash: without it the map would hold an unsalted hash of the passphrase.
  detail::guarded_buffer id_key;
  std::mutex mutex;
  std::map<cache_key, std::shared_ptr<const secret_key>> keys;
  std::uint64_t derivations = 0;
};

key_cache::key_cache(kdf_limits limits) : state_(std::make_unique<state>()) {
  state_->limits = limits;
  // An allocation failure here leaves id_key empty; derive() reports it instead of throwing.
  if (auto buffer = detail::guarded_buffer::allocate(crypto_generichash_KEYBYTES)) {
    state_->id_key = std::move(*buffer);
    randombytes_buf(state_->id_key.data(), state_->id_key.size());
    state_->id_key.seal_read_only();
  }
}

key_cache::~key_cache() = default;

result<std::shared_ptr<const secret_key>> key_cache::derive(const passphrase& pass, const kdf_params& params) {
  TZ_CHECK(validate(params, state_->limits));
  if (state_->id_key.data() == nullptr) {
    return make_error(errc::crypto, "key cache: could not allocate guarded memory for its hashing key");
  }
  passphrase_id id{};
  const auto bytes = pass.bytes();
  crypto_generichash(id.data(), id.size(), bytes.data(), bytes.size(), state_->id_key.data(), state_->id_key.size());
  const cache_key entry{id, params.opslimit, params.memlimit_bytes, params.alg, params.salt};

  // Held across the derivation on purpose: concurrent callers for the same file wait for the one
  // derivation instead of each running Argon2 (and each allocating memlimit bytes).
  std::lock_guard lock(state_->mutex);
  if (const auto found = state_->keys.find(entry); found != state_->keys.end()) return found->second;
  TZ_TRY(key, derive_key(pass, params, state_->limits));
  ++state_->derivations;
  auto shared = std::make_shared<const secret_key>(std::move(key));
  state_->keys.emplace(entry, shared);
  return shared;
}

std::uint64_t key_cache::derivation_count() const {
  std::lock_guard lock(state_->mutex);
  return state_->derivations;
}

}  // namespace tz::crypto

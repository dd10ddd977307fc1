// The key objects behind _C.Decryption and _C.Encryption.
#pragma once

#include "tz/format/encryption.hpp"
#include "tz/crypto/sodium.hpp"

#include <memory>
#include <optional>

namespace tz::py {

struct decryption_keys {
  format::decryption decryption;
};

struct encryption_keys {
  crypto::secret_key key;                  // exact, random or derived
  std::optional<crypto::kdf_params> kdf;   // set for passphrase keys (stored in every header)
  // A fresh encryptor for one file (its own nonce-reuse guard).
  std::unique_ptr<format::tensorizer_encryptor> make_encryptor() const;
};

}  // namespace tz::py

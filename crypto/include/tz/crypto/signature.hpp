// Elliptic-curve signatures, X.509 chains and base64 for signed models (signing/): OpenSSL stays
// behind this header. The curves are the ones OpenSSF model signing accepts: P-256, P-384, P-521,
// each signing with its own hash (SHA-256, SHA-384, SHA-512), signatures DER-encoded.
#pragma once

#include "tz/base/error.hpp"

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct evp_pkey_st;  // OpenSSL's EVP_PKEY

namespace tz {

class ec_key;
result<ec_key> certificate_public_key(std::string_view der, const std::string& what);

class ec_key {
 public:
  // A PEM "PUBLIC KEY" (SubjectPublicKeyInfo). `what` names the file in errors.
  static result<ec_key> public_from_pem(std::string_view pem, const std::string& what);
  // An unencrypted PEM private key (PKCS#8 "PRIVATE KEY" or SEC1 "EC PRIVATE KEY").
  static result<ec_key> private_from_pem(std::string_view pem, const std::string& what);

  bool has_private() const noexcept { return private_; }
  // The public half as PEM SubjectPublicKeyInfo, 64 columns: byte for byte what Python's
  // `cryptography` writes, whose SHA-256 model signing records as the key's hint.
  std::string public_pem() const;
  // A DER ECDSA signature of `message` with the curve's hash. Needs the private half.
  result<std::string> sign(std::string_view message) const;
  // Whether `signature` (DER ECDSA) signs `message` under this key with the curve's hash.
  bool verify(std::string_view message, std::string_view signature) const;
  bool same_public_key(const ec_key& other) const;
  // "P-256", "P-384" or "P-521".
  std::string curve_name() const;

 private:
  friend result<ec_key> certificate_public_key(std::string_view der, const std::string& what);
  explicit ec_key(std::shared_ptr<evp_pkey_st> key, bool is_private) : key_(std::move(key)), private_(is_private) {}
  std::shared_ptr<evp_pkey_st> key_;
  bool private_ = false;
};

// Every certificate of a PEM bundle, as DER (in file order). `what` names the file in errors.
result<std::vector<std::string>> pem_certificates_to_der(std::string_view pem, const std::string& what);

// Verifies `chain` (DER, the signing certificate first, then the intermediates it carries) against
// the `trusted` certificates (DER) at the signing certificate's notBefore (when it signed: a
// signature outlives its short-lived certificate, as model signing checks it), and that the
// certificate may sign (digitalSignature key usage, or the code-signing extended usage). Returns the
// signing certificate's key, which must be an EC key of a supported curve.
result<ec_key> verify_certificate_chain(std::span<const std::string> chain, std::span<const std::string> trusted);

// The signing certificate's public key, unverified (to check that a key pairs with its certificate).
result<ec_key> certificate_public_key(std::string_view der, const std::string& what);

std::string base64_encode(std::string_view bytes);
// Standard alphabet with padding; whitespace is not accepted. `what` names the field in errors.
result<std::string> base64_decode(std::string_view text, const std::string& what);

}  // namespace tz

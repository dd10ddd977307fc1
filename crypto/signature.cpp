// EC keys, ECDSA, X.509 chain checks and base64 on OpenSSL 3 (see signature.hpp).
#include "tz/crypto/signature.hpp"

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <ctime>

namespace tz {
namespace {

template <class T, void (*Free)(T*)>
struct freer {
  void operator()(T* p) const noexcept { Free(p); }
};
using bio_ptr = std::unique_ptr<BIO, freer<BIO, BIO_free_all>>;
using x509_ptr = std::unique_ptr<X509, freer<X509, X509_free>>;
using store_ptr = std::unique_ptr<X509_STORE, freer<X509_STORE, X509_STORE_free>>;
using store_ctx_ptr = std::unique_ptr<X509_STORE_CTX, freer<X509_STORE_CTX, X509_STORE_CTX_free>>;
using md_ctx_ptr = std::unique_ptr<EVP_MD_CTX, freer<EVP_MD_CTX, EVP_MD_CTX_free>>;

std::shared_ptr<EVP_PKEY> own(EVP_PKEY* key) { return {key, EVP_PKEY_free}; }

// The first queued OpenSSL error, for messages ("" when none); clears the queue.
std::string openssl_reason() {
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return {};
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return std::string(": ") + text;
}

bio_ptr memory_bio(std::string_view bytes) {
  return bio_ptr(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

// No passphrase prompt on a terminal: an encrypted private key is refused.
int no_passphrase(char*, int, int, void*) { return -1; }

// The curve's group name in model signing's terms, or "" for anything else.
std::string supported_curve(EVP_PKEY* key) {
  if (EVP_PKEY_is_a(key, "EC") != 1) return {};
  char group[64] = {};
  std::size_t length = 0;
  if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group, &length) != 1) return {};
  std::string_view g(group, length);
  if (g == "prime256v1" || g == "P-256") return "P-256";
  if (g == "secp384r1" || g == "P-384") return "P-384";
  if (g == "secp521r1" || g == "P-521") return "P-521";
  return {};
}

result<std::shared_ptr<EVP_PKEY>> check_curve(EVP_PKEY* raw, const std::string& what) {
  auto key = own(raw);
  if (supported_curve(key.get()).empty())
    return make_error(errc::unsupported, what + ": not an elliptic-curve key on P-256, P-384 or P-521 (the curves "
                                                "model signing accepts)");
  return key;
}

// The hash each curve signs with (model signing's get_ec_key_hash).
const EVP_MD* curve_hash(EVP_PKEY* key) {
  const int bits = EVP_PKEY_get_bits(key);
  return bits <= 256 ? EVP_sha256() : bits <= 384 ? EVP_sha384() : EVP_sha512();
}

std::time_t not_before(X509* certificate) {
  std::tm when{};
  ASN1_TIME_to_tm(X509_get0_notBefore(certificate), &when);
  return timegm(&when);
}

result<x509_ptr> parse_der(std::string_view der, const std::string& what) {
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  x509_ptr cert(d2i_X509(nullptr, &p, static_cast<long>(der.size())));
  if (!cert) return make_error(errc::format, what + ": not a DER X.509 certificate" + openssl_reason());
  return cert;
}

// digitalSignature key usage, or else the code-signing extended usage (model signing's rule).
bool may_sign(X509* certificate) {
  const std::uint32_t flags = X509_get_extension_flags(certificate);
  if ((flags & EXFLAG_KUSAGE) && (X509_get_key_usage(certificate) & KU_DIGITAL_SIGNATURE)) return true;
  return (flags & EXFLAG_XKUSAGE) && (X509_get_extended_key_usage(certificate) & XKU_CODE_SIGN);
}

}  // namespace

result<ec_key> ec_key::public_from_pem(std::string_view pem, const std::string& what) {
  auto bio = memory_bio(pem);
  EVP_PKEY* raw = PEM_read_bio_PUBKEY(bio.get(), nullptr, no_passphrase, nullptr);
  if (!raw) return make_error(errc::format, what + ": not a PEM public key" + openssl_reason());
  TZ_TRY(key, check_curve(raw, what));
  return ec_key(std::move(key), false);
}

result<ec_key> ec_key::private_from_pem(std::string_view pem, const std::string& what) {
  auto bio = memory_bio(pem);
  EVP_PKEY* raw = PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr);
  if (!raw)
    return make_error(errc::format, what + ": not an unencrypted PEM private key" + openssl_reason());
  TZ_TRY(key, check_curve(raw, what));
  return ec_key(std::move(key), true);
}

std::string ec_key::public_pem() const {
  bio_ptr bio(BIO_new(BIO_s_mem()));
  PEM_write_bio_PUBKEY(bio.get(), key_.get());
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

result<std::string> ec_key::sign(std::string_view message) const {
  if (!private_) return make_error(errc::invalid_argument, "signing needs a private key");
  md_ctx_ptr ctx(EVP_MD_CTX_new());
  std::size_t length = 0;
  const auto* m = reinterpret_cast<const unsigned char*>(message.data());
  if (EVP_DigestSignInit(ctx.get(), nullptr, curve_hash(key_.get()), nullptr, key_.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &length, m, message.size()) != 1)
    return make_error(errc::crypto, "ECDSA signing failed" + openssl_reason());
  std::string signature(length, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &length, m, message.size()) != 1)
    return make_error(errc::crypto, "ECDSA signing failed" + openssl_reason());
  signature.resize(length);
  return signature;
}

bool ec_key::verify(std::string_view message, std::string_view signature) const {
  md_ctx_ptr ctx(EVP_MD_CTX_new());
  const bool ok =
      EVP_DigestVerifyInit(ctx.get(), nullptr, curve_hash(key_.get()), nullptr, key_.get()) == 1 &&
      EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                       reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  ERR_clear_error();
  return ok;
}

bool ec_key::same_public_key(const ec_key& other) const { return EVP_PKEY_eq(key_.get(), other.key_.get()) == 1; }

std::string ec_key::curve_name() const { return supported_curve(key_.get()); }

result<std::vector<std::string>> pem_certificates_to_der(std::string_view pem, const std::string& what) {
  auto bio = memory_bio(pem);
  std::vector<std::string> out;
  while (x509_ptr cert{PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr)}) {
    unsigned char* der = nullptr;
    const int n = i2d_X509(cert.get(), &der);
    if (n <= 0) return make_error(errc::format, what + ": a certificate could not be encoded" + openssl_reason());
    out.emplace_back(reinterpret_cast<const char*>(der), static_cast<std::size_t>(n));
    OPENSSL_free(der);
  }
  ERR_clear_error();  // the end of the PEM stream reads as an error
  if (out.empty()) return make_error(errc::format, what + ": no PEM certificate in it");
  return out;
}

result<ec_key> certificate_public_key(std::string_view der, const std::string& what) {
  TZ_TRY(cert, parse_der(der, what));
  EVP_PKEY* raw = X509_get_pubkey(cert.get());
  if (!raw) return make_error(errc::format, what + ": no public key in the certificate" + openssl_reason());
  TZ_TRY(key, check_curve(raw, what));
  return ec_key(std::move(key), false);
}

result<ec_key> verify_certificate_chain(std::span<const std::string> chain, std::span<const std::string> trusted) {
  if (chain.empty()) return make_error(errc::crypto, "the signature carries no certificate");
  if (trusted.empty()) return make_error(errc::invalid_argument, "no trusted certificate was given for the chain");
  TZ_TRY(leaf, parse_der(chain[0], "the signing certificate"));
  store_ptr store(X509_STORE_new());
  for (std::size_t i = 0; i < trusted.size(); ++i) {
    TZ_TRY(cert, parse_der(trusted[i], "trusted certificate " + std::to_string(i)));
    X509_STORE_add_cert(store.get(), cert.get());
  }
  std::unique_ptr<STACK_OF(X509), void (*)(STACK_OF(X509)*)> untrusted(
      sk_X509_new_null(), [](STACK_OF(X509)* s) { sk_X509_pop_free(s, X509_free); });
  for (std::size_t i = 1; i < chain.size(); ++i) {
    TZ_TRY(cert, parse_der(chain[i], "certificate " + std::to_string(i) + " of the signature's chain"));
    sk_X509_push(untrusted.get(), cert.release());
  }
  store_ctx_ptr ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), leaf.get(), untrusted.get());
  X509_VERIFY_PARAM_set_time(X509_STORE_CTX_get0_param(ctx.get()), not_before(leaf.get()));
  if (X509_verify_cert(ctx.get()) != 1) {
    const int code = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return make_error(errc::crypto, std::string("the signing certificate does not chain to a trusted certificate (") +
                                        X509_verify_cert_error_string(code) + ")");
  }
  if (!may_sign(leaf.get()))
    return make_error(errc::crypto, "the signing certificate may not sign: neither the digitalSignature key usage nor "
                                    "the code-signing extended key usage");
  return certificate_public_key(chain[0], "the signing certificate");
}

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), reinterpret_cast<const unsigned char*>(bytes.data()),
                  static_cast<int>(bytes.size()));
  return out;
}

result<std::string> base64_decode(std::string_view text, const std::string& what) {
  if (text.size() % 4 != 0) return make_error(errc::format, what + ": not base64 (length " + std::to_string(text.size()) + ")");
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) {
    ERR_clear_error();
    return make_error(errc::format, what + ": not base64");
  }
  // EVP_DecodeBlock counts the padding as zero bytes.
  std::size_t pad = 0;
  while (pad < 2 && pad < text.size() && text[text.size() - 1 - pad] == '=') ++pad;
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

}  // namespace tz

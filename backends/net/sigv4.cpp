// AWS Signature Version 4 signing with OpenSSL HMAC-SHA256 / SHA-256 (see tz/sigv4.hpp).
#include "tz/backends/sigv4.hpp"

#include "tz/crypto/hash.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <cstdint>

namespace tz {
namespace {

std::string hmac_sha256(std::string_view key, std::string_view message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &out_len);
  return std::string(reinterpret_cast<const char*>(out), out_len);
}

std::string hex_of(std::string_view raw) {
  return to_hex({reinterpret_cast<const std::uint8_t*>(raw.data()), raw.size()});
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// SigV4 header values: leading/trailing blanks removed, inner runs of blanks collapsed to one.
std::string trim_value(std::string_view value) {
  std::string out;
  bool blank = false;
  for (char c : value) {
    if (c == ' ' || c == '\t') {
      blank = !out.empty();
      continue;
    }
    if (blank) out.push_back(' ');
    blank = false;
    out.push_back(c);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> canonical_headers(const sigv4_request& request) {
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& [name, value] : request.headers) headers.emplace_back(lower(name), trim_value(value));
  std::sort(headers.begin(), headers.end());
  return headers;
}

}  // namespace

std::string uri_encode(std::string_view text, bool keep_slash) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    bool unreserved = std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

std::string sha256_hex(std::span<const std::byte> bytes) {
  auto digest = sha256(bytes);
  return to_hex(digest);
}

std::string sha256_hex(std::string_view text) { return sha256_hex(std::as_bytes(std::span(text))); }

std::string sigv4_signing_key(std::string_view secret, std::string_view date8, std::string_view region,
                              std::string_view service) {
  std::string key = hmac_sha256("AWS4" + std::string(secret), date8);
  key = hmac_sha256(key, region);
  key = hmac_sha256(key, service);
  return hmac_sha256(key, "aws4_request");
}

std::string sigv4_signed_headers(const sigv4_request& request) {
  std::string out;
  for (const auto& [name, value] : canonical_headers(request)) {
    if (!out.empty()) out.push_back(';');
    out += name;
  }
  return out;
}

std::string sigv4_canonical_request(const sigv4_request& request) {
  std::vector<std::pair<std::string, std::string>> query;
  for (const auto& [name, value] : request.query) query.emplace_back(uri_encode(name, false), uri_encode(value, false));
  std::sort(query.begin(), query.end());
  std::string out = request.method + "\n" + request.canonical_uri + "\n";
  for (std::size_t i = 0; i < query.size(); ++i) out += (i ? "&" : "") + query[i].first + "=" + query[i].second;
  out += "\n";
  for (const auto& [name, value] : canonical_headers(request)) out += name + ":" + value + "\n";
  out += "\n" + sigv4_signed_headers(request) + "\n" + request.payload_sha256_hex;
  return out;
}

std::string sigv4_string_to_sign(const sigv4_scope& scope, std::string_view canonical_request) {
  return "AWS4-HMAC-SHA256\n" + scope.amz_date + "\n" + scope.amz_date.substr(0, 8) + "/" + scope.region +
         "/" + scope.service + "/aws4_request\n" + sha256_hex(canonical_request);
}

sigv4_signature sigv4_sign(const sigv4_request& request, const aws_credentials& credentials,
                           const sigv4_scope& scope) {
  std::string date8 = scope.amz_date.substr(0, 8);
  std::string key = sigv4_signing_key(credentials.secret_access_key, date8, scope.region, scope.service);
  sigv4_signature out;
  out.signature_hex = hex_of(hmac_sha256(key, sigv4_string_to_sign(scope, sigv4_canonical_request(request))));
  out.authorization = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + date8 + "/" +
                      scope.region + "/" + scope.service + "/aws4_request, SignedHeaders=" +
                      sigv4_signed_headers(request) + ", Signature=" + out.signature_hex;
  return out;
}

std::string sigv4_amz_date(std::time_t utc) {
  std::tm tm{};
  gmtime_r(&utc, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%SZ", &tm);
  return text;
}

}  // namespace tz

// AWS Signature Version 4 (header authorization) for S3 and S3-compatible stores.
#pragma once

#include <cstddef>
#include <ctime>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tz {

struct aws_credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // sent as x-amz-security-token when not empty
  // Both keys empty: requests go out unsigned (public buckets).
  bool anonymous() const noexcept { return access_key_id.empty() && secret_access_key.empty(); }
};

// What SigV4 signs of a request. Names and values are given as they go on the wire, except the
// query parameters, which are given decoded and are encoded here.
struct sigv4_request {
  std::string method;                                      // "GET", "PUT", ...
  std::string canonical_uri;                               // already percent-encoded path, "/b/k"
  std::vector<std::pair<std::string, std::string>> query;  // decoded (name, value)
  std::vector<std::pair<std::string, std::string>> headers;  // every header to sign, incl. host
  std::string payload_sha256_hex;  // hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
};

struct sigv4_scope {
  std::string region = "us-east-1";
  std::string service = "s3";
  std::string amz_date;  // "YYYYMMDDTHHMMSSZ" (UTC), the x-amz-date header value
};

// RFC 3986 percent-encoding as SigV4 wants it: unreserved A-Z a-z 0-9 - _ . ~ stay, every other
// byte becomes %XX (upper-case hex); '/' stays when keep_slash (object keys in paths).
std::string uri_encode(std::string_view text, bool keep_slash);

// Lower-case hex SHA-256 of bytes.
std::string sha256_hex(std::span<const std::byte> bytes);
std::string sha256_hex(std::string_view text);

// The 32-byte signing key HMAC(HMAC(HMAC(HMAC("AWS4"+secret, date8), region), service), "aws4_request").
std::string sigv4_signing_key(std::string_view secret, std::string_view date8, std::string_view region,
                              std::string_view service);

// The canonical request text (method, URI, sorted query, sorted lower-case headers with trimmed
// values, signed-header list, payload hash), and the ';'-joined list of signed header names.
std::string sigv4_canonical_request(const sigv4_request& request);
std::string sigv4_signed_headers(const sigv4_request& request);

// "AWS4-HMAC-SHA256\n<amz_date>\n<date8>/<region>/<service>/aws4_request\n<hex sha256 of canonical>"
std::string sigv4_string_to_sign(const sigv4_scope& scope, std::string_view canonical_request);

// The hex signature and the full Authorization header value for request under scope.
struct sigv4_signature {
  std::string signature_hex;
  std::string authorization;
};
sigv4_signature sigv4_sign(const sigv4_request& request, const aws_credentials& credentials,
                           const sigv4_scope& scope);

// The x-amz-date value for a UTC time.
std::string sigv4_amz_date(std::time_t utc);

}  // namespace tz

// Parsing of the remote locations the loader understands: http(s)://, s3:// and redis:// URIs.
#pragma once

#include "tz/base/error.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace tz {

// A parsed remote location. Which fields mean what depends on the scheme:
//   http(s)://host[:port]/path?query  host, port (default 80/443), target "/path?query" ("/" if empty)
//   s3://bucket/key                   host = bucket, target = key without its leading '/'
//   redis://host[:port]/prefix        host, port (default 6379), target = key prefix (no leading '/')
struct parsed_uri {
  std::string scheme;      // lower-case: "http", "https", "s3" or "redis"
  std::string host;        // host name, IPv4 or IPv6 literal (without brackets), or S3 bucket
  std::uint16_t port = 0;  // explicit or the scheme's default; 0 for s3
  std::string target;      // see above
};

// Splits a URI into its parts. Fails with errc::invalid_argument naming the URI when the scheme is
// not one of the four above, the host or bucket is empty, the port is not a number in 1..65535,
// or an s3:// URI has no key.
result<parsed_uri> parse_uri(std::string_view text);

// True when text starts with a scheme this library can open ("http://", "S3://", ...).
bool is_remote_uri(std::string_view text) noexcept;

}  // namespace tz

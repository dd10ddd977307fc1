// HTTP/HTTPS range-request byte source: keep-alive connection pool, ranged GETs straight into the
// caller's spans, ETag pinning, timeouts, retries with backoff, and large reads split across connections.
#pragma once

#include "tz/base/byte_source.hpp"
#include "tz/base/error.hpp"
#include "tz/backends/net_options.hpp"

#include <memory>
#include <string>

namespace tz {

// Opens url (http:// or https://). Nothing is sent until size() or read(). Fails with
// errc::invalid_argument for a bad URL or CA file. size() issues a HEAD, requires
// "Accept-Ranges: bytes" and pins the ETag; every later ranged GET carries If-Match with it, so a
// changed object fails (errc::io) instead of mixing versions. Errors name the URL, the offset and
// the attempts made: errc::not_found (404), errc::auth (401/403, rejected certificate),
// errc::timeout, errc::network (budget exhausted).
result<std::unique_ptr<byte_source>> open_http_source(const http_options& options, std::string url);

}  // namespace tz

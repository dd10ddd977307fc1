// Parsing of http(s)://, s3:// and redis:// URIs (see tz/uri.hpp).
#include "tz/backends/uri.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace tz {
namespace {

error bad_uri(std::string_view text, std::string_view why) {
  return make_error(errc::invalid_argument, "invalid URI '" + std::string(text) + "': " + std::string(why));
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::uint16_t default_port(std::string_view scheme) {
  if (scheme == "http") return 80;
  if (scheme == "https") return 443;
  if (scheme == "redis") return 6379;
  return 0;
}

// Splits "host[:port]" or "[v6]:port" into its parts.
result<void> parse_authority(std::string_view text, std::string_view authority, parsed_uri& out) {
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) return bad_uri(text, "unterminated IPv6 literal");
    out.host = std::string(authority.substr(1, close - 1));
    auto rest = authority.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return bad_uri(text, "garbage after IPv6 literal");
    if (!rest.empty()) port_text = rest.substr(1);
  } else {
    auto colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (out.host.empty()) return bad_uri(text, "empty host");
  if (port_text.empty()) return {};
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc{} || end != port_text.data() + port_text.size() || port == 0 || port > 65535)
    return bad_uri(text, "port '" + std::string(port_text) + "' is not a number in 1..65535");
  out.port = static_cast<std::uint16_t>(port);
  return {};
}

}  // namespace

bool is_remote_uri(std::string_view text) noexcept {
  auto sep = text.find("://");
  if (sep == std::string_view::npos) return false;
  auto scheme = lower(text.substr(0, sep));
  return scheme == "http" || scheme == "https" || scheme == "s3" || scheme == "redis";
}

result<parsed_uri> parse_uri(std::string_view text) {
  auto sep = text.find("://");
  if (sep == std::string_view::npos) return bad_uri(text, "no '://'");
  parsed_uri out;
  out.scheme = lower(text.substr(0, sep));
  if (out.scheme != "http" && out.scheme != "https" && out.scheme != "s3" && out.scheme != "redis")
    return bad_uri(text, "unsupported scheme '" + out.scheme + "' (http, https, s3, redis)");
  auto rest = text.substr(sep + 3);
  auto slash = rest.find_first_of("/?");
  auto authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);
  if (out.scheme == "s3") {
    if (authority.empty()) return bad_uri(text, "empty bucket");
    out.host = std::string(authority);
    if (path.size() < 2 || path.front() != '/') return bad_uri(text, "no object key");
    out.target = std::string(path.substr(1));
    return out;
  }
  out.port = default_port(out.scheme);
  TZ_CHECK(parse_authority(text, authority, out));
  if (out.scheme == "redis") {
    out.target = path.empty() ? std::string() : std::string(path.substr(1));
  } else {
    out.target = path.empty() ? std::string("/") : std::string(path);
    if (out.target.front() == '?') out.target.insert(0, "/");
  }
  return out;
}

}  // namespace tz

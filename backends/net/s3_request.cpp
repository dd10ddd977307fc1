// S3 request plumbing: endpoint/bucket addressing, SigV4 signing hook, XML error decoding.
#include "s3_request.hpp"

#include "tz/backends/uri.hpp"

#include <ctime>

namespace tz::net {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() + 0 && hex_digit(text[i + 1]) >= 0 && hex_digit(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex_digit(text[i + 1]) * 16 + hex_digit(text[i + 2])));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

// Adds x-amz-date, x-amz-content-sha256, the session token and the Authorization header.
void sign_request(http_request& request, const aws_credentials& credentials, const std::string& region,
                  const std::string& host_header) {
  if (credentials.anonymous()) return;
  std::string payload = request.body.empty() && request.method != "PUT" && request.method != "POST"
                            ? "UNSIGNED-PAYLOAD" : sha256_hex(request.body);
  sigv4_scope scope{region, "s3", sigv4_amz_date(std::time(nullptr))};
  request.headers.push_back({"x-amz-date", scope.amz_date});
  request.headers.push_back({"x-amz-content-sha256", payload});
  if (!credentials.session_token.empty()) request.headers.push_back({"x-amz-security-token", credentials.session_token});
  sigv4_request canonical{request.method, request.target, {}, {{"host", host_header}}, payload};
  if (auto q = request.target.find('?'); q != std::string::npos) {
    canonical.canonical_uri = request.target.substr(0, q);
    std::string_view query = std::string_view(request.target).substr(q + 1);
    while (!query.empty()) {
      auto amp = query.find('&');
      auto pair = query.substr(0, amp);
      auto eq = pair.find('=');
      canonical.query.emplace_back(percent_decode(pair.substr(0, eq)),
                                   eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1)));
      query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    }
  }
  for (const auto& h : request.headers) canonical.headers.emplace_back(h.name, h.value);
  request.headers.push_back({"Authorization", sigv4_sign(canonical, credentials, scope).authorization});
}

std::string describe_s3_error(const http_response& response) { return describe_s3_error_body(response.body); }

}  // namespace

result<s3_object> open_s3_object(const s3_options& options, const std::string& url, bool for_write) {
  TZ_TRY(uri, parse_uri(url));
  if (uri.scheme != "s3") return make_error(errc::invalid_argument, "'" + url + "' is not an s3:// URL");
  TZ_TRY(resolved, resolve_s3(options, for_write));
  TZ_TRY(endpoint_uri, parse_uri(resolved.endpoint_url));
  http_endpoint endpoint{endpoint_uri.scheme == "https", endpoint_uri.host, endpoint_uri.port, options.http.connect_host};
  s3_object out{url, "/" + uri.host + "/" + uri_encode(uri.target, true), nullptr, {}};
  if (resolved.virtual_host_style) {
    // glibc does not resolve *.localhost: connect to the endpoint itself, address the bucket by Host.
    if (endpoint.connect_host.empty()) endpoint.connect_host = endpoint.host;
    endpoint.host = uri.host + "." + endpoint.host;
    out.object_path = "/" + uri_encode(uri.target, true);
  }
  http_client_options client_options;
  client_options.verify_peer = options.http.verify_peer;
  client_options.ca_file = options.http.ca_file;
  client_options.connect_timeout = options.http.connect_timeout;
  client_options.first_byte_timeout = options.http.first_byte_timeout;
  client_options.stall_timeout = options.http.stall_timeout;
  std::string host_header = endpoint.host_header();
  TZ_TRY(client, http_client::create(std::move(endpoint), std::move(client_options)));
  out.client = std::move(client);
  out.hooks.sign = [credentials = resolved.credentials, region = resolved.region, host_header](http_request& r) {
    sign_request(r, credentials, region, host_header);
  };
  out.hooks.describe = describe_s3_error;
  out.hooks.size_by_range_get = true;
  return out;
}

}  // namespace tz::net

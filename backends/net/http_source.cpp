// open_http_source: an http(s):// URL as a ranged_source without request signing.
#include "tz/backends/http_source.hpp"

#include "ranged_source.hpp"
#include "tz/backends/uri.hpp"

namespace tz {

result<std::unique_ptr<byte_source>> open_http_source(const http_options& options, std::string url) {
  TZ_TRY(uri, parse_uri(url));
  if (uri.scheme != "http" && uri.scheme != "https")
    return make_error(errc::invalid_argument, "open_http_source: '" + url + "' is not an http(s) URL");
  net::http_endpoint endpoint{uri.scheme == "https", uri.host, uri.port, options.connect_host};
  net::http_client_options client_options;
  client_options.verify_peer = options.verify_peer;
  client_options.ca_file = options.ca_file;
  client_options.connect_timeout = options.connect_timeout;
  client_options.first_byte_timeout = options.first_byte_timeout;
  client_options.stall_timeout = options.stall_timeout;
  TZ_TRY(client, net::http_client::create(std::move(endpoint), std::move(client_options)));
  return std::unique_ptr<byte_source>(
      std::make_unique<net::ranged_source>(std::move(url), std::move(client), uri.target, options, net::request_hooks{}));
}

}  // namespace tz

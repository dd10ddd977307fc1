// The HTTP client's response parsing, shared by the client and the in-memory parse (http_response_parse.hpp).
#include "http_response_parse.hpp"

#include <boost/beast/core/flat_buffer.hpp>

#include <algorithm>
#include <cctype>

namespace tz::net {
namespace http = boost::beast::http;
using boost::system::error_code;

namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// Beast's read loop (read_some in boost/beast/http/impl/read.hpp) over an in-memory peer: parse what
// the buffer holds, read more when the parser needs it, report end-of-stream to the parser.
template <class Parser>
error_code read_in_memory(std::span<const char>& peer, boost::beast::flat_buffer& buffer, Parser& parser,
                          bool header_only, std::size_t read_bytes) {
  error_code ec;
  while (!(header_only ? parser.is_header_done() : parser.is_done())) {
    if (buffer.size() > 0) {
      const auto used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec && ec != http::error::need_more) return ec;
      if (!ec && used > 0) continue;
      ec = {};
    }
    if (peer.empty()) {
      if (!parser.got_some()) return http::error::end_of_stream;
      parser.put_eof(ec);
      return ec;
    }
    const auto n = std::min(peer.size(), std::max<std::size_t>(read_bytes, 1));
    auto space = buffer.prepare(n);
    std::copy_n(peer.data(), n, static_cast<char*>(space.data()));
    buffer.commit(n);
    peer = peer.subspan(n);
  }
  return ec;
}

}  // namespace

std::string_view http_response::header(std::string_view name) const noexcept {
  for (const auto& h : headers)
    if (iequals(h.name, name)) return h.value;
  return {};
}

void prepare_head_parser(head_parser& parser, std::string_view method) {
  parser.body_limit(boost::none);
  if (method == "HEAD") parser.skip(true);
}

http_response response_of_head(const head_parser& parser) {
  http_response response;
  const auto& head = parser.get();
  response.status = head.result_int();
  for (const auto& field : head) response.headers.push_back({std::string(field.name_string()), std::string(field.value())});
  response.content_length = parser.content_length().value_or(0);
  return response;
}

error_code check_body_length(const head_parser& parser, std::size_t body_limit) {
  if (parser.content_length() && *parser.content_length() > body_limit) return http::error::body_limit;
  return {};
}

void prepare_body_parser(string_body_parser& parser, std::size_t body_limit) { parser.body_limit(body_limit); }

result<http_response> parse_response_bytes(std::span<const char> bytes, std::string_view method,
                                           std::size_t body_limit, std::size_t read_bytes) {
  boost::beast::flat_buffer buffer;
  head_parser head;
  prepare_head_parser(head, method);
  if (auto ec = read_in_memory(bytes, buffer, head, true, read_bytes))
    return make_error(errc::network, "reading the response header of " + std::string(method) + " failed: " + ec.message());
  auto response = response_of_head(head);
  if (head.is_done()) return response;
  if (auto ec = check_body_length(head, body_limit))
    return make_error(errc::network, "reading the body of " + std::string(method) + " failed: " + ec.message());
  string_body_parser body{std::move(head)};
  prepare_body_parser(body, body_limit);
  if (auto ec = read_in_memory(bytes, buffer, body, false, read_bytes))
    return make_error(errc::network, "reading the body of " + std::string(method) + " failed: " + ec.message());
  response.body = std::move(body.get().body());
  return response;
}

}  // namespace tz::net

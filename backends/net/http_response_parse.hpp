// How the HTTP client parses a response: the Beast parser settings it reads with, and the same
// steps over bytes already in memory (for tests and fuzzing). Included by Beast-using sources only.
#pragma once

#include "http_client.hpp"

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <span>
#include <string_view>

namespace tz::net {

using head_parser = boost::beast::http::response_parser<boost::beast::http::empty_body>;
using string_body_parser = boost::beast::http::response_parser<boost::beast::http::string_body>;

// The head: Beast's header limit (8 KiB), no body limit yet (the body is read by a parser of its
// own or straight into the caller's spans), and no body at all for a HEAD request.
void prepare_head_parser(head_parser& parser, std::string_view method);
// Status, fields and Content-Length of a parsed head.
http_response response_of_head(const head_parser& parser);
// Refuses (Beast's error::body_limit) a Content-Length over body_limit before a body parser takes
// over: the head was parsed without a body limit, and Beast's string body reserves the declared
// length up front, so a hostile "Content-Length: 10^16" would otherwise be one huge allocation.
boost::system::error_code check_body_length(const head_parser& parser, std::size_t body_limit);
// The body parser taking over from the head parser: bodies over body_limit bytes are refused.
void prepare_body_parser(string_body_parser& parser, std::size_t body_limit);

// Parses one response to `method` out of `bytes`, fed to the parsers `read_bytes` at a time as a
// socket read would deliver them, the end of `bytes` taken as the peer closing the connection.
// Fails with errc::network naming the stage and Beast's reason, as exchange() does.
result<http_response> parse_response_bytes(std::span<const char> bytes, std::string_view method,
                                           std::size_t body_limit, std::size_t read_bytes);

}  // namespace tz::net

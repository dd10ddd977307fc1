// libFuzzer harness: a hostile HTTP/1.1 response through the client's parser settings
// (http_response_parse.hpp). Input: a byte picking the method (GET or HEAD), a byte picking the
// socket read size, then the response bytes. A parse promises a body within the body limit (none
// for HEAD), and no more header or body bytes than arrived.
#include "fuzz_support.hpp"
#include "http_response_parse.hpp"

using namespace tz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::string_view method = (data[0] & 1) ? "HEAD" : "GET";
  const std::size_t read_bytes = std::size_t{data[1]} * 16 + 1;
  constexpr std::size_t body_limit = 4096;
  const auto bytes = std::span(reinterpret_cast<const char*>(data + 2), size - 2);
  auto r = net::parse_response_bytes(bytes, method, body_limit, read_bytes);
  if (!r) {
    fuzz::require(r.error().code == errc::network, "parse errors are errc::network");
    return 0;
  }
  fuzz::require(r->status <= 999, "at most three status digits (Beast accepts 000-999)");
  fuzz::require(r->body.size() <= body_limit && r->body.size() <= bytes.size(), "the body is bounded");
  if (method == "HEAD") fuzz::require(r->body.empty(), "no body for HEAD");
  std::size_t header_bytes = 0;
  for (const auto& h : r->headers) header_bytes += h.name.size() + h.value.size();
  fuzz::require(header_bytes <= bytes.size(), "no more header bytes than arrived");
  return 0;
}

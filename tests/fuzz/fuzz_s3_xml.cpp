// libFuzzer harness: S3 XML bodies (error documents, InitiateMultipartUpload results) as a hostile
// server may send them: the extracted tag text is exactly what lies between the first open tag and
// the next close tag, and an error description stays short and free of control characters.
#include "fuzz_support.hpp"
#include "s3_xml.hpp"

using namespace tz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto body = fuzz::text_of(fuzz::bytes_of(data, size));
  for (std::string_view tag : {"UploadId", "Code", "Message"}) {
    const auto value = net::xml_value(body, tag);
    const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
    if (value.empty()) continue;
    const auto at = body.find(open);
    fuzz::require(at != std::string_view::npos && body.substr(at + open.size(), value.size()) == value,
                  "the value follows the first open tag");
    fuzz::require(body.substr(at + open.size() + value.size(), close.size()) == close, "the value ends at a close tag");
    fuzz::require(value.find(close) == std::string::npos, "the value holds no close tag");
  }
  const auto described = net::describe_s3_error_body(body);
  fuzz::require(described.size() <= 3 + 2 * (net::s3_error_text_max + 3) + 2, "the description is bounded");
  for (char c : described)
    fuzz::require(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f, "the description has no control characters");
  return 0;
}

// S3 XML bodies: tag values and error descriptions (s3_xml.hpp).
#include "s3_xml.hpp"

namespace tz::net {
namespace {

std::string quoted_text(std::string text) {
  if (text.size() > s3_error_text_max) text = text.substr(0, s3_error_text_max) + "...";
  for (auto& c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return text;
}

}  // namespace

std::string xml_value(std::string_view xml, std::string_view tag) {
  auto open = "<" + std::string(tag) + ">";
  auto start = xml.find(open);
  if (start == std::string_view::npos) return {};
  start += open.size();
  auto end = xml.find("</" + std::string(tag) + ">", start);
  return end == std::string_view::npos ? std::string() : std::string(xml.substr(start, end - start));
}

std::string describe_s3_error_body(std::string_view body) {
  auto code = xml_value(body, "Code");
  if (code.empty()) return {};
  auto message = xml_value(body, "Message");
  return "S3 " + quoted_text(std::move(code)) + (message.empty() ? "" : ": " + quoted_text(std::move(message)));
}

}  // namespace tz::net

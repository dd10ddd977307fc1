// Reading S3's small XML bodies (error documents, InitiateMultipartUpload results). Pure, no I/O.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tz::net {

// The longest Code or Message text quoted from an error body into a message.
inline constexpr std::size_t s3_error_text_max = 256;

// The text of the first <tag>...</tag> in an S3 XML body ("" when absent), entities left as they are.
std::string xml_value(std::string_view xml, std::string_view tag);

// "S3 <Code>: <Message>" for an S3 error document, "" when the body names no Code. Each text is cut
// to s3_error_text_max bytes and control characters become '?': the body comes from the server.
std::string describe_s3_error_body(std::string_view body);

}  // namespace tz::net

// Shared pieces of the S3 source and uploader: the client for a bucket, SigV4 request signing,
// object targets and S3 XML error decoding.
#pragma once

#include "ranged_source.hpp"
#include "s3_xml.hpp"
#include "tz/backends/s3.hpp"

namespace tz::net {

// One bucket/key on a resolved endpoint, with its HTTP client and signing hooks.
struct s3_object {
  std::string url;          // "s3://bucket/key", for messages
  std::string object_path;  // canonical URI: "/bucket/key" (path style) or "/key" (vhost)
  std::shared_ptr<http_client> client;
  request_hooks hooks;
};

result<s3_object> open_s3_object(const s3_options& options, const std::string& url, bool for_write);

}  // namespace tz::net

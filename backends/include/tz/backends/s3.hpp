// S3 (and S3-compatible: Ceph RGW, MinIO, CoreWeave) byte source and uploader: an HTTP range source
// whose requests carry AWS SigV4 headers, plus PutObject / multipart upload.
#pragma once

#include "tz/base/byte_source.hpp"
#include "tz/base/error.hpp"
#include "tz/backends/net_options.hpp"
#include "tz/backends/sigv4.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace tz {

struct s3_options {
  http_options http;  // TLS, timeouts, retries, parallel connections for reads
  // Credentials, resolved in this order (format/FORMAT.md §12.1, plus the AWS chain): both keys given
  // here ("" and "" = unsigned, for public buckets); the s3cmd config (s3_config_path, else
  // ~/.s3cfg, section [default]: access_key, secret_key, host_base, use_https);
  // AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN; ~/.aws/credentials (or
  // AWS_SHARED_CREDENTIALS_FILE), profile `profile`, else AWS_PROFILE, else "default"; finally
  // unsigned requests for reads (writes fail with errc::auth).
  std::optional<std::string> access_key_id;
  std::optional<std::string> secret_access_key;
  std::string session_token;  // sent as x-amz-security-token
  std::string s3_config_path;
  // false: consult no s3cmd config at all, not even ~/.s3cfg (a front-end that looks for it
  // elsewhere, as the Python package does through stream_io._s3_default_config_paths, found none).
  bool use_s3_config = true;
  std::string profile;
  // Endpoint, in order: this; host_base of a consulted s3cmd config; AWS_ENDPOINT_URL_S3;
  // AWS_ENDPOINT_URL; accel-object.ord1.coreweave.com (reads) / object.ord1.coreweave.com (writes).
  // Without a scheme https:// is used (http:// with force_http); an explicit http:// endpoint is
  // refused unless force_http or it came from the environment.
  std::string endpoint;
  bool force_http = false;
  std::string region;  // default: AWS_REGION, AWS_DEFAULT_REGION, else us-east-1
  // Path style (https://host/bucket/key) by default; virtual-host style (https://bucket.host/key)
  // when asked or when the endpoint host is cwobject.com or cwlota.com.
  bool virtual_host_style = false;
  // Uploads: one PutObject below multipart_threshold_bytes, else multipart with parts of part_bytes
  // (at least 5 MiB, the S3 minimum), upload_concurrency parts in flight.
  std::uint64_t multipart_threshold_bytes = 64ull << 20;
  std::uint64_t part_bytes = 16ull << 20;
  std::size_t upload_concurrency = 4;
};

// Where and as whom requests go, after the resolution rules above.
struct s3_resolved {
  aws_credentials credentials;  // anonymous() = unsigned requests
  std::string endpoint_url;     // "https://host[:port]"
  std::string region;
  bool virtual_host_style = false;
};
result<s3_resolved> resolve_s3(const s3_options& options, bool for_write);

// Opens s3://bucket/key for reading. size() is a signed "Range: bytes=0-0" GET (so errors carry
// S3's XML error code); reads are signed ranged GETs pinned to the object's ETag. Errors:
// errc::auth (403: SignatureDoesNotMatch, InvalidAccessKeyId, AccessDenied...), errc::not_found
// (404: NoSuchKey, NoSuchBucket), plus those of open_http_source.
result<std::unique_ptr<byte_source>> open_s3_source(const s3_options& options, std::string url);

// Fills dst with the bytes at offset_bytes of the data being uploaded.
using s3_part_reader = std::function<task<result<void>>(std::uint64_t offset_bytes, std::span<std::byte> dst)>;

// Uploads size_bytes bytes obtained from read to s3://bucket/key: PutObject or multipart (see
// s3_options). A failed multipart upload is aborted (AbortMultipartUpload) before the error is
// returned. Completes when S3 acknowledged the whole object.
task<result<void>> s3_upload(const s3_options& options, std::string url, std::uint64_t size_bytes,
                             s3_part_reader read);
// The same for bytes in memory, and for any byte source (e.g. a local file).
task<result<void>> s3_upload(const s3_options& options, std::string url, std::span<const std::byte> bytes);
task<result<void>> s3_upload(const s3_options& options, std::string url, byte_source& data);

}  // namespace tz

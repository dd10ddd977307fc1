// S3 source (a signed ranged_source) and uploader (PutObject, or multipart with abort on failure).
#include "parallel.hpp"
#include "s3_request.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/this_coro.hpp>

#include <atomic>
#include <cstring>

namespace tz {
namespace {

namespace asio = boost::asio;
using net::http_request;
using net::s3_object;

constexpr std::uint64_t min_part_bytes = 5ull << 20;

task<result<net::http_response>> send(s3_object& object, const tz::s3_options& options, std::string method,
                                      std::string target, std::span<const std::byte> body, std::string what) {
  auto make = [&] { return http_request{method, target, {}, body}; };
  TZ_CO_TRY(response, co_await net::exchange_with_retries(*object.client, make, object.hooks, options.http.retry, what));
  // S3 may answer 200 with an <Error> body (CompleteMultipartUpload): treat it as a failure.
  if (response.status >= 300 || response.body.find("<Error>") != std::string::npos) {
    if (response.status < 300) response.status = 500;
    co_return net::status_error(response, object.hooks, what);
  }
  co_return response;
}

task<result<std::string>> upload_part(s3_object& object, const s3_options& options, const std::string& upload_id,
                                      int number, std::uint64_t offset, std::uint64_t length, s3_part_reader& read) {
  std::vector<std::byte> buffer(length);
  TZ_CO_CHECK(co_await read(offset, buffer));
  auto target = object.object_path + "?partNumber=" + std::to_string(number) + "&uploadId=" + uri_encode(upload_id, false);
  TZ_CO_TRY(response, co_await send(object, options, "PUT", target, buffer,
                                    object.url + ": UploadPart " + std::to_string(number) + " (offset " + std::to_string(offset) + ")"));
  co_return std::string(response.header("ETag"));
}

// Uploads every part with `concurrency` workers pulling part numbers from a shared counter.
task<result<void>> upload_parts(s3_object& object, const s3_options& options, const std::string& upload_id,
                                std::uint64_t size_bytes, std::uint64_t part_bytes, s3_part_reader& read,
                                std::vector<std::string>& etags) {
  const std::size_t parts = static_cast<std::size_t>((size_bytes + part_bytes - 1) / part_bytes);
  etags.assign(parts, {});
  std::atomic<std::size_t> next{0};
  auto worker = [&]() -> task<result<void>> {
    for (std::size_t i = next++; i < parts; i = next++) {
      auto offset = i * part_bytes;
      TZ_CO_TRY(etag, co_await upload_part(object, options, upload_id, static_cast<int>(i + 1), offset,
                                           std::min(part_bytes, size_bytes - offset), read));
      etags[i] = std::move(etag);
    }
    co_return result<void>{};
  };
  auto ex = co_await asio::this_coro::executor;
  using op_type = decltype(asio::co_spawn(ex, worker(), asio::deferred));
  std::vector<op_type> ops;
  for (std::size_t w = 0; w < std::max<std::size_t>(1, std::min(options.upload_concurrency, parts)); ++w)
    ops.push_back(asio::co_spawn(ex, worker(), asio::deferred));
  co_return co_await net::all_succeed(std::move(ops));
}

task<result<void>> multipart_upload(s3_object& object, const s3_options& options, std::uint64_t size_bytes,
                                    s3_part_reader& read) {
  TZ_CO_TRY(initiated, co_await send(object, options, "POST", object.object_path + "?uploads=", {},
                                     object.url + ": CreateMultipartUpload"));
  auto upload_id = net::xml_value(initiated.body, "UploadId");
  if (upload_id.empty()) co_return make_error(errc::network, object.url + ": CreateMultipartUpload returned no UploadId");
  const std::string upload_target = object.object_path + "?uploadId=" + uri_encode(upload_id, false);
  std::vector<std::string> etags;
  auto part_bytes = std::max(options.part_bytes, min_part_bytes);
  auto uploaded = co_await upload_parts(object, options, upload_id, size_bytes, part_bytes, read, etags);
  result<net::http_response> completed = make_error(errc::io, "not completed");
  if (uploaded) {
    std::string xml = "<CompleteMultipartUpload>";
    for (std::size_t i = 0; i < etags.size(); ++i)
      xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags[i] + "</ETag></Part>";
    xml += "</CompleteMultipartUpload>";
    completed = co_await send(object, options, "POST", upload_target, std::as_bytes(std::span(xml)),
                              object.url + ": CompleteMultipartUpload");
    if (completed) co_return result<void>{};
  }
  // Abort so the parts do not linger (and cost storage); report the original failure.
  error failure = uploaded ? completed.error() : uploaded.error();
  auto aborted = co_await send(object, options, "DELETE", upload_target, {}, object.url + ": AbortMultipartUpload");
  if (!aborted) failure.message += "; AbortMultipartUpload also failed: " + aborted.error().message;
  co_return failure;
}

}  // namespace

result<std::unique_ptr<byte_source>> open_s3_source(const s3_options& options, std::string url) {
  TZ_TRY(object, net::open_s3_object(options, url, false));
  return std::unique_ptr<byte_source>(std::make_unique<net::ranged_source>(
      std::move(url), std::move(object.client), object.object_path, options.http, std::move(object.hooks)));
}

task<result<void>> s3_upload(const s3_options& options, std::string url, std::uint64_t size_bytes, s3_part_reader read) {
  TZ_CO_TRY(object, net::open_s3_object(options, url, true));
  if (size_bytes >= options.multipart_threshold_bytes && size_bytes > min_part_bytes)
    co_return co_await multipart_upload(object, options, size_bytes, read);
  std::vector<std::byte> buffer(size_bytes);
  TZ_CO_CHECK(co_await read(0, buffer));
  TZ_CO_CHECK(co_await send(object, options, "PUT", object.object_path, buffer, url + ": PutObject"));
  co_return result<void>{};
}

task<result<void>> s3_upload(const s3_options& options, std::string url, std::span<const std::byte> bytes) {
  s3_part_reader read = [bytes](std::uint64_t offset, std::span<std::byte> dst) -> task<result<void>> {
    std::memcpy(dst.data(), bytes.data() + offset, dst.size());
    co_return result<void>{};
  };
  co_return co_await s3_upload(options, std::move(url), bytes.size(), std::move(read));
}

task<result<void>> s3_upload(const s3_options& options, std::string url, byte_source& data) {
  TZ_CO_TRY(size_bytes, co_await data.size());
  s3_part_reader read = [&data](std::uint64_t offset, std::span<std::byte> dst) -> task<result<void>> {
    std::span<std::byte> spans[] = {dst};
    co_return co_await data.read(offset, spans);
  };
  co_return co_await s3_upload(options, std::move(url), size_bytes, std::move(read));
}

}  // namespace tz

// FILE-or-URI handling for the CLI and the Python module: byte sources, a windowed synchronous reader,
// downloads and uploads.
#include "tz/sources/sources.hpp"

#include "tz/backends/file_source.hpp"
#include "tz/backends/uring_service.hpp"
#include "tz/format/redis_layout.hpp"
#include "tz/format/tensorizer.hpp"
#include "tz/base/posix_io.hpp"
#include "tz/backends/uri.hpp"

#include <boost/asio/post.hpp>

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace tz {

namespace {

constexpr std::uint64_t download_chunk_bytes = 64ull << 20;

// Creates a private temporary directory ($TMPDIR or /tmp) for a download or an upload.
result<std::string> make_temp_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/tensorizer-XXXXXX";
  if (!::mkdtemp(pattern.data()))
    return make_error(errc::io, "cannot create a temporary directory " + pattern + ": " + std::strerror(errno));
  return pattern;
}

void remove_dir(const std::string& dir) noexcept {
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
}

// The last path component of a URI ("model.tensors"), so a temporary file keeps OUT's extension.
std::string base_name(const std::string& uri) {
  auto name = uri.substr(uri.find_last_of('/') + 1);
  name = name.substr(0, name.find_first_of("?#"));
  if (name.empty() || name == "." || name == "..") name = "out";
  return name;
}

// Downloads all of `source` into `path`, chunk by chunk (each chunk split over the connections).
result<void> download(scheduler& sched, byte_source& source, const std::string& path) {
  TZ_TRY(size_bytes, size_blocking(sched, source));
  unique_fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd) return os_error(errno, "file " + path + ": cannot create");
  std::vector<std::byte> chunk(std::min(size_bytes, download_chunk_bytes));
  for (std::uint64_t offset = 0; offset < size_bytes; offset += chunk.size()) {
    auto part = std::span(chunk).first(std::min<std::uint64_t>(chunk.size(), size_bytes - offset));
    TZ_CHECK(read_blocking(sched, source, offset, part));
    TZ_CHECK(pwrite_full(fd.get(), part, offset, "file " + path));
  }
  return {};
}

// The index of the .tensors file whose bytes are `bytes` (its header and metadata are parsed and
// checked against the file's size, as the loader does).
result<format::file_index> tensors_index(std::span<const std::byte> bytes, const std::string& source) {
  if (bytes.size() < format::file_prefix_bytes) {
    TZ_CHECK(format::parse_file_header(bytes, bytes.size(), source));  // reports a bad magic first
    return make_error(errc::format, source + ": file too small (" + std::to_string(bytes.size()) +
                                        " bytes) for the 73-byte tensorizer header");
  }
  TZ_TRY(header, format::parse_file_header(bytes.first(format::file_prefix_bytes), bytes.size(), source));
  return format::parse_index(header, bytes.subspan(format::file_prefix_bytes, header.metadata_bytes), bytes.size(),
                             source);
}

}  // namespace

result<remote_options> remote_options_from(const remote_settings& s) {
  const auto spelled = [&](std::string_view keyword) { return s.spell ? s.spell(keyword) : std::string(keyword); };
  remote_options o;
  for (const auto& [name, seconds] : s.time_limits)
    if (auto r = set_time_limit(o, name, seconds); !r)
      return make_error(errc::invalid_argument, spelled(name) + ": " + r.error().message);
  if (s.ca_file) o.http.ca_file = *s.ca_file;
  o.http.verify_peer = s.verify_tls;
  if (s.connections > 256)
    return make_error(errc::invalid_argument, spelled("connections") + " expects 1..256 (0: the default), got " +
                                                  std::to_string(s.connections));
  if (s.connections != 0)
    o.http.connections = o.redis.connections = o.s3.upload_concurrency = static_cast<std::size_t>(s.connections);
  for (const auto& [name, value] : s.headers) {
    if (name.empty() || name.find_first_of("\r\n:") != std::string::npos || value.find_first_of("\r\n") != std::string::npos)
      return make_error(errc::invalid_argument, spelled("headers") + ": HTTP header names and values must not contain "
                                                                     "CR/LF (or ':' in the name), got '" + name + "'");
    o.http.headers.emplace_back(name, value);
  }
  o.s3.http = o.http;  // TLS, time limits, headers and connections apply to S3 as well
  o.s3.endpoint = s.s3_endpoint;
  o.s3.force_http = s.s3_force_http.value_or(s.s3_endpoint.rfind("http://", 0) == 0);
  o.s3.region = s.s3_region;
  o.s3.access_key_id = s.s3_access_key_id;
  o.s3.secret_access_key = s.s3_secret_access_key;
  o.s3.session_token = s.s3_session_token;
  o.s3.s3_config_path = s.s3_config_path;
  o.s3.use_s3_config = s.s3_use_config;
  o.s3.virtual_host_style = s.s3_virtual_host;
  TZ_TRY(cache, cache_options_from_env());
  o.cache = std::move(cache);
  if (s.cache_dir) o.cache.dir = *s.cache_dir;
  if (s.cache_max_bytes) o.cache.max_bytes = *s.cache_max_bytes;
  return o;
}

result<void> set_time_limit(remote_options& o, std::string_view name, double seconds) {
  struct limit {
    std::string_view name;
    std::chrono::milliseconds* http;
    std::chrono::milliseconds* redis;
    bool zero_allowed;  // 0 = no limit, for the request-wide ones
  };
  const limit limits[] = {{"connect_timeout", &o.http.connect_timeout, &o.redis.connect_timeout, false},
                          {"first_byte_timeout", &o.http.first_byte_timeout, &o.redis.first_byte_timeout, false},
                          {"stall_timeout", &o.http.stall_timeout, &o.redis.stall_timeout, false},
                          {"give_up_after", &o.http.retry.give_up_after, &o.redis.retry.give_up_after, true},
                          {"deadline", &o.http.retry.deadline, &o.redis.retry.deadline, true}};
  for (const auto& l : limits) {
    if (l.name != name) continue;
    if (!(seconds >= 0 && seconds <= 86'400) || (!l.zero_allowed && seconds == 0))
      return make_error(errc::invalid_argument, std::string(name) + " expects seconds, " +
                                                    (l.zero_allowed ? "0 (none) to 86400" : "more than 0, at most 86400") +
                                                    ", got " + std::to_string(seconds));
    // A nonzero time never rounds down to 0, which would mean "no limit".
    const auto ms = static_cast<long long>(seconds * 1000 + 0.5);
    *l.http = *l.redis = std::chrono::milliseconds(seconds > 0 ? std::max(ms, 1LL) : 0);
    return {};
  }
  return make_error(errc::invalid_argument, "unknown time limit '" + std::string(name) + "'");
}

void start_io_rings(scheduler& sched) {
  for (unsigned i = 0; i < sched.thread_count(); ++i) {
    boost::asio::post(sched.worker_executor(i), [ex = sched.worker_executor(i)] {
      try {
        static_cast<void>(uring_service::of(ex));
      } catch (const std::system_error&) {
        // io_uring unavailable here: file reads fall back to preadv (file_source.cpp).
      }
    });
  }
}

result<std::shared_ptr<byte_source>> open_any(const std::string& file_or_uri, const remote_options& options) {
  if (!is_remote_uri(file_or_uri)) {
    TZ_TRY(file, file_source::open(file_or_uri));
    return std::shared_ptr<byte_source>(std::move(file));
  }
  TZ_TRY(uri, parse_uri(file_or_uri));
  result<std::unique_ptr<byte_source>> source = make_error(errc::invalid_argument, "unreachable");
  if (uri.scheme == "http" || uri.scheme == "https") source = open_http_source(options.http, file_or_uri);
  else if (uri.scheme == "s3") source = open_s3_source(options.s3, file_or_uri);
  else source = open_redis_source(options.redis, file_or_uri);
  if (!source) return source.error();
  std::shared_ptr<byte_source> opened(std::move(*source));
  if (options.cache.dir.empty() || uri.scheme == "redis") return opened;
  // The cache keys an object by its URI and the endpoint it comes from (the version is the ETag).
  std::string key = file_or_uri + "\n" + (uri.scheme == "s3" ? options.s3.endpoint : options.http.connect_host);
  return open_cached(std::move(opened), std::move(key), options.cache);
}

result<std::uint64_t> size_blocking(scheduler& sched, byte_source& source) {
  try {
    return tz::run(sched, source.size());
  } catch (const std::exception& e) {
    return make_error(errc::io, source.name() + ": " + e.what());
  }
}

result<void> read_blocking(scheduler& sched, byte_source& source, std::uint64_t offset_bytes, std::span<std::byte> dst) {
  std::span<std::byte> spans[] = {dst};
  try {
    return tz::run(sched, source.read(offset_bytes, spans));
  } catch (const std::exception& e) {
    return make_error(errc::io, source.name() + " at offset " + std::to_string(offset_bytes) + ": " + e.what());
  }
}

result<local_input> local_input::fetch(scheduler& sched, const std::string& file_or_uri, const remote_options& options) {
  local_input in;
  if (!is_remote_uri(file_or_uri)) {
    in.path_ = file_or_uri;
    return in;
  }
  TZ_TRY(source, open_any(file_or_uri, options));
  TZ_TRY(dir, make_temp_dir());
  in.temp_dir_ = dir;
  in.path_ = dir + "/" + base_name(file_or_uri);
  TZ_CHECK(download(sched, *source, in.path_));
  return in;
}

local_input::local_input(local_input&& other) noexcept
    : path_(std::move(other.path_)), temp_dir_(std::exchange(other.temp_dir_, {})) {}

local_input::~local_input() { remove_dir(temp_dir_); }

result<output_target> output_target::create(const std::string& file_or_uri, const remote_options& options) {
  output_target out;
  out.out_ = file_or_uri;
  if (!is_remote_uri(file_or_uri)) {
    out.path_ = file_or_uri;
    return out;
  }
  TZ_TRY(uri, parse_uri(file_or_uri));
  if (uri.scheme == "http" || uri.scheme == "https")
    return make_error(errc::unsupported, file_or_uri + ": cannot write over HTTP; OUT may be a path, s3:// or redis://");
  out.scheme_ = uri.scheme;
  out.options_ = options;
  TZ_TRY(dir, make_temp_dir());
  out.temp_dir_ = dir;
  out.path_ = dir + "/" + base_name(file_or_uri);
  return out;
}

output_target::output_target(output_target&& other) noexcept
    : out_(std::move(other.out_)), scheme_(std::move(other.scheme_)), path_(std::move(other.path_)),
      temp_dir_(std::exchange(other.temp_dir_, {})), options_(std::move(other.options_)) {}

output_target::~output_target() { remove_temp(); }

void output_target::remove_temp() noexcept {
  remove_dir(temp_dir_);
  temp_dir_.clear();
}

result<void> output_target::publish(scheduler& sched) {
  if (scheme_.empty()) return {};
  result<void> r;
  try {
    if (scheme_ == "s3") {
      auto file = file_source::open(path_);
      r = file ? tz::run(sched, s3_upload(options_.s3, out_, **file)) : result<void>(file.error());
    } else {
      auto m = mapped_file::open(path_);
      auto index = m ? tensors_index(m->bytes(), "file " + path_) : result<format::file_index>(m.error());
      if (!index) {
        r = make_error(errc::unsupported, out_ + ": redis:// takes .tensors files only (format/FORMAT.md §13): " +
                                              index.error().message);
      } else {
        const auto ranges = format::redis_layout(*index, m->bytes());
        r = tz::run(sched, write_virtual_file(options_.redis, out_, ranges));
      }
    }
  } catch (const std::exception& e) {
    r = make_error(errc::io, out_ + ": upload failed: " + e.what());
  }
  remove_temp();
  return r;
}

}  // namespace tz

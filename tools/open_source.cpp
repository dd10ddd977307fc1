// FILE-or-URI handling for the CLI: byte sources, a windowed synchronous reader, downloads and uploads.
#include "open_source.hpp"

#include "tz/file_source.hpp"
#include "tz/uri.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace tz::cli {

const char* const remote_help =
    "  FILE / IN / OUT may be a local path or a URI: http(s)://host[:port]/path (read only),\n"
    "  s3://bucket/key, redis://host[:port]/prefix (tensorizer's key layout).\n"
    "  --ca-file F          trust this CA bundle for https (default: the system store, SSL_CERT_FILE)\n"
    "  --insecure           do not verify TLS certificates (explicit opt-out)\n"
    "  --connections N      parallel connections per remote source (default 4)\n"
    "  --s3-config F        s3cmd config with access_key, secret_key, host_base (default ~/.s3cfg)\n"
    "  --s3-endpoint URL    S3 endpoint (else s3cfg host_base, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL)\n"
    "  --s3-region R        SigV4 region (else AWS_REGION, AWS_DEFAULT_REGION, us-east-1)\n"
    "  --s3-virtual-host    virtual-host style addressing (https://bucket.host/key)\n"
    "  Time limits, in seconds (fractions allowed), for http(s)://, s3:// and redis://:\n"
    "  --connect-timeout S     TCP connect (and TLS handshake) of one attempt (default 5)\n"
    "  --first-byte-timeout S  request sent -> first byte of the answer (default 10)\n"
    "  --stall-timeout S       no byte moved for S mid-transfer (default 10); slow but moving is never cut\n"
    "  --give-up-after S       report a request once S seconds went to failed attempts (fruitless\n"
    "                          waits and backoff; default 20; 0 = until the 6 attempts are spent)\n"
    "  --deadline S            hard limit per request, retries included, cuts even moving\n"
    "                          transfers (default 0 = none)\n"
    "  S3 credentials: s3cfg, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN,\n"
    "  ~/.aws/credentials (AWS_PROFILE); none: unsigned requests (public buckets).\n";

namespace {

constexpr std::uint64_t window_max_bytes = 4ull << 20;     // read-ahead window of the sequential reader
constexpr std::uint64_t window_index_bytes = 256ull << 10;  // first reads, before the index is known
constexpr std::uint64_t download_chunk_bytes = 64ull << 20;

std::vector<std::string> joined(std::vector<std::string> own, const std::vector<std::string>& more) {
  own.insert(own.end(), more.begin(), more.end());
  return own;
}

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

result<std::uint64_t> size_blocking(scheduler& sched, byte_source& source) {
  try {
    return tz::run(sched, source.size());
  } catch (const std::exception& e) {
    return make_error(errc::io, source.name() + ": " + e.what());
  }
}

// Read state of a remote sequential reader: one window of bytes fetched ahead, ending at a tensor
// boundary once the index is known, so a small header read also brings its (small) tensor.
struct window_reader {
  scheduler* sched;
  std::shared_ptr<byte_source> source;
  std::uint64_t size_bytes = 0;
  std::vector<std::uint64_t> boundaries;  // sorted tensor header/data/end offsets
  std::vector<std::byte> window;
  std::uint64_t window_offset = 0;

  // Where a window fetch for [offset, offset + n) ends: the farthest boundary within reach.
  std::uint64_t fetch_end(std::uint64_t offset, std::uint64_t n) const {
    const std::uint64_t need = offset + n;
    const std::uint64_t limit = std::min(size_bytes, offset + window_max_bytes);
    if (boundaries.empty()) return std::max(need, std::min(limit, offset + window_index_bytes));
    auto it = std::upper_bound(boundaries.begin(), boundaries.end(), limit);
    if (it != boundaries.begin() && *std::prev(it) >= need) return *std::prev(it);
    return need;
  }

  result<void> read(std::uint64_t offset, std::span<std::byte> dst) {
    const std::uint64_t n = dst.size();
    if (n == 0) return {};
    if (offset >= window_offset && offset - window_offset + n <= window.size()) {
      std::memcpy(dst.data(), window.data() + (offset - window_offset), n);
      return {};
    }
    if (n >= window_max_bytes / 2 || offset + n > size_bytes) return read_blocking(*sched, *source, offset, dst);
    window.resize(fetch_end(offset, n) - offset);
    window_offset = offset;
    if (auto r = read_blocking(*sched, *source, offset, window); !r) {
      window.clear();
      return r;
    }
    std::memcpy(dst.data(), window.data(), n);
    return {};
  }
};


// A local file read with pread; the descriptor closes when the last copy of the read function goes.
// (Ours rather than format::file_reader::open(path), whose descriptor is closed by a temporary at
// d5e0fa3: every read then fails with EBADF.)
result<format::file_reader> open_local_reader(const std::string& path) {
  struct owned_fd {
    int fd;
    explicit owned_fd(int f) : fd(f) {}
    owned_fd(const owned_fd&) = delete;
    owned_fd& operator=(const owned_fd&) = delete;
    ~owned_fd() { ::close(fd); }
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return make_error(errno == ENOENT ? errc::not_found : errc::io, "file " + path + ": cannot open: " + std::strerror(errno));
  auto owner = std::make_shared<owned_fd>(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return make_error(errc::io, "file " + path + ": cannot stat: " + std::strerror(errno));
  auto read = [owner, path](std::uint64_t offset, std::span<std::byte> dst) -> result<void> {
    for (std::size_t done = 0; done < dst.size();) {
      const auto n = ::pread(owner->fd, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return make_error(errc::io, "file " + path + ": read failed at offset " + std::to_string(offset + done) + ": " + std::strerror(errno));
      if (n == 0) return make_error(errc::format, "file " + path + ": unexpected end of file at offset " + std::to_string(offset + done));
      done += static_cast<std::size_t>(n);
    }
    return {};
  };
  return format::file_reader::open(std::move(read), static_cast<std::uint64_t>(st.st_size), "file " + path);
}

// Downloads all of `source` into `path`, chunk by chunk (each chunk split over the connections).
result<void> download(scheduler& sched, byte_source& source, const std::string& path) {
  TZ_TRY(size_bytes, size_blocking(sched, source));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return make_error(errc::io, "file " + path + ": cannot create: " + std::strerror(errno));
  std::vector<std::byte> chunk(std::min(size_bytes, download_chunk_bytes));
  result<void> r;
  for (std::uint64_t offset = 0; offset < size_bytes && r; offset += chunk.size()) {
    auto part = std::span(chunk).first(std::min<std::uint64_t>(chunk.size(), size_bytes - offset));
    r = read_blocking(sched, source, offset, part);
    for (std::size_t done = 0; r && done < part.size();) {
      const auto w = ::write(fd, part.data() + done, part.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) r = make_error(errc::io, "file " + path + ": write failed: " + std::strerror(errno));
      else done += static_cast<std::size_t>(w);
    }
  }
  ::close(fd);
  return r;
}

}  // namespace

std::vector<std::string> with_remote_valued(std::vector<std::string> own) { return joined(std::move(own), remote_valued_options); }
std::vector<std::string> with_remote_flags(std::vector<std::string> own) { return joined(std::move(own), remote_flag_options); }

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

namespace {

// Applies --connect-timeout S and the other time-limit options.
result<void> time_limits_from(const args& a, remote_options& o) {
  for (const char* name : time_limit_names) {
    std::string option = "--" + std::string(name);
    std::replace(option.begin(), option.end(), '_', '-');
    auto text = a.get(option);
    if (!text) continue;
    char* end = nullptr;
    const double seconds = std::strtod(text->c_str(), &end);
    if (text->empty() || end != text->c_str() + text->size())
      return make_error(errc::invalid_argument, "option " + option + " expects seconds, got '" + *text + "'");
    if (auto r = set_time_limit(o, name, seconds); !r)
      return make_error(errc::invalid_argument, "option " + option + ": " + r.error().message);
  }
  return {};
}

}  // namespace

result<remote_options> remote_options_from(const args& a) {
  remote_options o;
  TZ_CHECK(time_limits_from(a, o));
  if (auto f = a.get("--ca-file")) o.http.ca_file = *f;
  o.http.verify_peer = !a.has("--insecure");
  if (auto n = a.get("--connections")) {
    TZ_TRY(count, to_uint("--connections", *n));
    if (count == 0 || count > 256)
      return make_error(errc::invalid_argument, "option --connections expects 1..256, got " + *n);
    o.http.connections = static_cast<std::size_t>(count);
    o.redis.connections = static_cast<std::size_t>(count);
    o.s3.upload_concurrency = static_cast<std::size_t>(count);
  }
  o.s3.http = o.http;
  if (auto f = a.get("--s3-config")) o.s3.s3_config_path = *f;
  if (auto e = a.get("--s3-endpoint")) {
    o.s3.endpoint = *e;
    // Typed on the command line, an http:// endpoint is the user's explicit choice.
    o.s3.force_http = e->rfind("http://", 0) == 0;
  }
  if (auto r = a.get("--s3-region")) o.s3.region = *r;
  o.s3.virtual_host_style = a.has("--s3-virtual-host");
  return o;
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
  return std::shared_ptr<byte_source>(std::move(*source));
}

result<void> read_blocking(scheduler& sched, byte_source& source, std::uint64_t offset_bytes, std::span<std::byte> dst) {
  std::span<std::byte> spans[] = {dst};
  try {
    return tz::run(sched, source.read(offset_bytes, spans));
  } catch (const std::exception& e) {
    return make_error(errc::io, source.name() + " at offset " + std::to_string(offset_bytes) + ": " + e.what());
  }
}

result<format::file_reader> open_reader(scheduler& sched, const std::string& file_or_uri, const remote_options& options) {
  if (!is_remote_uri(file_or_uri)) return open_local_reader(file_or_uri);
  TZ_TRY(source, open_any(file_or_uri, options));
  TZ_TRY(size_bytes, size_blocking(sched, *source));
  auto state = std::make_shared<window_reader>(window_reader{&sched, source, size_bytes, {}, {}, 0});
  TZ_TRY(reader, format::file_reader::open(
                     [state](std::uint64_t offset, std::span<std::byte> dst) { return state->read(offset, dst); },
                     size_bytes, source->name()));
  for (const auto& e : reader.index().tensors) state->boundaries.insert(state->boundaries.end(), {e.header_offset, e.data_offset, e.end_offset()});
  std::sort(state->boundaries.begin(), state->boundaries.end());
  return reader;
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
      auto reader = open_local_reader(path_);
      mapped_file m;
      if (!reader) {
        r = make_error(errc::unsupported, out_ + ": redis:// takes .tensors files only (FORMAT.md §13): " +
                                              reader.error().message);
      } else if (r = map_file(path_, m); r) {
        const auto ranges = redis_layout(reader->index(), m.bytes());
        r = tz::run(sched, write_virtual_file(options_.redis, out_, ranges));
      }
    }
  } catch (const std::exception& e) {
    r = make_error(errc::io, out_ + ": upload failed: " + e.what());
  }
  remove_temp();
  return r;
}

std::vector<redis_range> redis_layout(const format::file_index& index, std::span<const std::byte> file) {
  // Without tensors the virtual file is everything but the 8-byte end marker.
  const std::uint64_t header_end = index.tensors.empty() ? (file.size() >= 8 ? file.size() - 8 : file.size())
                                                         : index.tensors.front().header_offset;
  std::vector<redis_range> ranges{{"header", 0, file.first(header_end)}};
  for (const auto& e : index.tensors) {
    ranges.push_back({e.name, e.header_offset, file.subspan(e.header_offset, e.header_bytes())});
    ranges.push_back({e.name, e.data_offset, file.subspan(e.data_offset, e.data_length)});
  }
  return ranges;
}

mapped_file::~mapped_file() {
  if (base != MAP_FAILED) ::munmap(base, size_bytes);
}

std::span<const std::byte> mapped_file::bytes() const {
  return {static_cast<const std::byte*>(base == MAP_FAILED ? nullptr : base), size_bytes};
}

result<void> map_file(const std::string& path, mapped_file& m) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(errc::io, "file " + path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  m.size_bytes = static_cast<std::size_t>(st.st_size);
  if (m.size_bytes) m.base = ::mmap(nullptr, m.size_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m.size_bytes && m.base == MAP_FAILED)
    return make_error(errc::io, "file " + path + ": cannot map: " + std::strerror(errno));
  return {};
}

}  // namespace tz::cli

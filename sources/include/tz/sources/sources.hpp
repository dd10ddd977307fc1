// Sources as a library (tz::sources, used by the CLI and the Python module): opening a local path or
// an http(s)://, s3:// or redis:// URI as a byte source, and writing an output
// that is a local path, S3 object or Redis prefix.
#pragma once

#include "tz/base/byte_source.hpp"
#include "tz/backends/cache.hpp"
#include "tz/backends/http_source.hpp"
#include "tz/backends/redis_source.hpp"
#include "tz/backends/s3.hpp"
#include "tz/engine/scheduler.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tz {

// How remote locations are reached; one set of settings for every scheme.
struct remote_options {
  http_options http;    // http:// and https://
  s3_options s3;        // s3:// (its .http carries the same TLS and connection settings)
  redis_options redis;  // redis://
  cache_options cache;  // http(s):// and s3:// through the node-local cache when cache.dir is set
};

// The time limits, by their Python keyword names; the CLI options are "--" + the name with '-'
// for '_' (--connect-timeout). In seconds, for http(s)://, s3:// and redis:// alike.
inline const char* const time_limit_names[] = {"connect_timeout", "first_byte_timeout", "stall_timeout",
                                               "give_up_after", "deadline"};
// Sets one of them; errc::invalid_argument for an unknown name or a time out of range (the
// per-wait timeouts must be positive; give_up_after and deadline take 0 for "no limit").
result<void> set_time_limit(remote_options& o, std::string_view name, double seconds);

// The remote settings every front end takes, as plain values: the CLI's flags, the C++ facade's and
// the C ABI's options, Python's keywords each fill this (translating only their own form), and
// remote_options_from() checks them and makes the remote_options, once for all of them.
struct remote_settings {
  std::optional<std::string> ca_file;  // trust this CA bundle for https (else the system store)
  bool verify_tls = true;
  std::uint64_t connections = 0;  // 1..256; 0: the default (a read of >= 16 MiB is split over them)
  std::vector<std::pair<std::string, std::string>> headers;  // extra HTTP request headers
  std::vector<std::pair<std::string, double>> time_limits;   // (one of time_limit_names, seconds)
  std::string s3_endpoint, s3_region, s3_config_path, s3_session_token;
  std::optional<std::string> s3_access_key_id, s3_secret_access_key;
  bool s3_use_config = true;  // read the s3cmd config (~/.s3cfg or s3_config_path)
  bool s3_virtual_host = false;
  // Plain http:// to the endpoint; unset: when the endpoint given here says http:// (an explicit
  // choice, as typed on a command line).
  std::optional<bool> s3_force_http;
  // The node-local cache: TENSORIZER_CACHE_DIR / _MAX_SIZE unless set here ("" dir: off).
  std::optional<std::string> cache_dir;
  std::optional<std::uint64_t> cache_max_bytes;
  // How the front end spells a setting in its errors, given the setting's keyword name
  // ("connections", "connect_timeout"): "option --connections", "options.connections". Unset: the keyword.
  std::function<std::string(std::string_view)> spell;
};

// Checks `s` and makes the remote options: errc::invalid_argument naming the setting as the front
// end spells it (connections out of 1..256, an unknown or out-of-range time limit, a header with
// CR/LF), or the environment's bad cache size.
result<remote_options> remote_options_from(const remote_settings& s);

// Has each worker of `sched` make its io_uring ring now, without waiting for it. A ring is made on
// a worker's first file read otherwise, and a first load's header pass then makes them all at
// once: 29 ms of a 4 GiB first load from Python on an H100 host (16 workers), against 0.6 ms for
// the same pass later. Called by open_checkpoint and Python's Source.open for local files, so the
// rings are made while the model opens (and a device context is made beside it).
void start_io_rings(scheduler& sched);

// Opens a local path (io_uring file source) or a remote URI, chosen by parse_uri's scheme. Nothing
// is fetched yet for remote sources (size() is the first round trip). Fails with the backend's
// error (errc::not_found for a missing local file, errc::invalid_argument for a malformed URI).
result<std::shared_ptr<byte_source>> open_any(const std::string& file_or_uri, const remote_options& options);

// Runs a byte source's size() on `sched` and blocks until it completes (never call from a worker).
result<std::uint64_t> size_blocking(scheduler& sched, byte_source& source);

// Runs a byte source's read on `sched` and blocks until it completes (never call from a worker).
result<void> read_blocking(scheduler& sched, byte_source& source, std::uint64_t offset_bytes,
                           std::span<std::byte> dst);

// A local copy of FILE or URI for commands that need a path (mmap): the path itself when local,
// else the object downloaded into a temporary file that is removed with this object.
class local_input {
 public:
  static result<local_input> fetch(scheduler& sched, const std::string& file_or_uri, const remote_options& options);
  local_input(local_input&&) noexcept;
  local_input& operator=(local_input&&) = delete;
  ~local_input();
  const std::string& path() const noexcept { return path_; }

 private:
  local_input() = default;
  std::string path_;
  std::string temp_dir_;  // non-empty when the file is a download to remove
};

// Where a command writes OUT. A local OUT is written in place (the writers are atomic: temp file +
// rename). A remote OUT is written to a temporary local file first; publish() then uploads it
// (s3://: PutObject or multipart, aborted on failure; redis://: the FORMAT.md §13 key layout, .tensors
// only). The temporary file is removed by publish() and by the destructor, whatever happened.
class output_target {
 public:
  static result<output_target> create(const std::string& file_or_uri, const remote_options& options);
  output_target(output_target&&) noexcept;
  output_target& operator=(output_target&&) = delete;
  ~output_target();

  // The local path to hand to the writer.
  const std::string& path() const noexcept { return path_; }
  // Uploads the written file when OUT is remote (no-op when local). Completes when the server
  // acknowledged everything; fails with the uploader's error naming OUT.
  result<void> publish(scheduler& sched);

 private:
  output_target() = default;
  void remove_temp() noexcept;
  std::string out_;
  std::string scheme_;  // "" for local
  std::string path_;
  std::string temp_dir_;
  remote_options options_;
};

}  // namespace tz

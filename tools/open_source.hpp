// The CLI's FILE-or-URI arguments: opening a local path or an http(s)://, s3:// or redis:// URI as a
// byte source or a sequential reader, and writing an output that is a local path, S3 object or Redis prefix.
#pragma once

#include "cli.hpp"
#include "tz/byte_source.hpp"
#include "tz/format/file_reader.hpp"
#include "tz/http_source.hpp"
#include "tz/redis_source.hpp"
#include "tz/s3.hpp"
#include "tz/scheduler.hpp"

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tz::cli {

// How remote locations are reached; one set of settings for every scheme.
struct remote_options {
  http_options http;    // http:// and https://
  s3_options s3;        // s3:// (its .http carries the same TLS and connection settings)
  redis_options redis;  // redis://
};

// The options every FILE-taking command accepts, for cli::parse (valued, then bare flags).
inline const std::vector<std::string> remote_valued_options{
    "--ca-file",         "--connections",          "--s3-config",     "--s3-endpoint", "--s3-region",
    "--connect-timeout", "--first-byte-timeout", "--stall-timeout", "--give-up-after", "--deadline"};
inline const std::vector<std::string> remote_flag_options{"--insecure", "--s3-virtual-host"};
// The time limits, by their Python keyword names; the CLI options are "--" + the name with '-'
// for '_' (--connect-timeout). In seconds, for http(s)://, s3:// and redis:// alike.
inline const char* const time_limit_names[] = {"connect_timeout", "first_byte_timeout", "stall_timeout",
                                               "give_up_after", "deadline"};
// Sets one of them; errc::invalid_argument for an unknown name or a time out of range (the
// per-wait timeouts must be positive; give_up_after and deadline take 0 for "no limit").
result<void> set_time_limit(remote_options& o, std::string_view name, double seconds);
// Help text describing them, to append to a command's usage.
extern const char* const remote_help;

// Builds remote_options from --ca-file F, --insecure, --connections N, --s3-config F,
// --s3-endpoint URL, --s3-region R, --s3-virtual-host, and the time limits --connect-timeout,
// --first-byte-timeout, --stall-timeout, --give-up-after, --deadline (seconds, for every scheme).
// S3 credentials and anything not given come from the environment and config files as resolve_s3
// describes. An explicit http:// endpoint is accepted (the user asked for it). Fails with
// errc::invalid_argument for a bad --connections or time.
result<remote_options> remote_options_from(const args& a);

// Opens a local path (io_uring file source) or a remote URI, chosen by parse_uri's scheme. Nothing
// is fetched yet for remote sources (size() is the first round trip). Fails with the backend's
// error (errc::not_found for a missing local file, errc::invalid_argument for a malformed URI).
result<std::shared_ptr<byte_source>> open_any(const std::string& file_or_uri, const remote_options& options);

// Options for the command-line list of valued options: `own` plus the remote ones.
std::vector<std::string> with_remote_valued(std::vector<std::string> own);
std::vector<std::string> with_remote_flags(std::vector<std::string> own);

// A synchronous reader over FILE or URI for the sequential commands. Local files are read with
// pread as before; remote ones through the source's read() run on `sched`, with small reads
// (tensor headers, small tensors) served from a read-ahead window that stops at tensor boundaries,
// so a walk costs about one request per large tensor. `sched` must outlive the reader.
result<format::file_reader> open_reader(scheduler& sched, const std::string& file_or_uri,
                                        const remote_options& options);

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

// The Redis keys of a .tensors file (FORMAT.md §13): "header" at 0 = bytes [0, first tensor header),
// then per tensor "<stored name>" at header_offset (its header) and at data_offset (its data); the
// end marker is not stored. `file` holds the whole file; the ranges point into it.
std::vector<redis_range> redis_layout(const format::file_index& index, std::span<const std::byte> file);

// A read-only mapping of a whole local file (zero-copy access to tensor bytes).
struct mapped_file {
  void* base = reinterpret_cast<void*>(-1);  // MAP_FAILED
  std::size_t size_bytes = 0;
  mapped_file() = default;
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file();
  std::span<const std::byte> bytes() const;
};
result<void> map_file(const std::string& path, mapped_file& m);

}  // namespace tz::cli

// The POSIX file primitives every module shares: errno errors, full positional reads and writes,
// and a read-only mapping of a whole file.
#pragma once

#include "tz/base/error.hpp"
#include "tz/base/unique_fd.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tz {

// "<what>: <strerror(err)>", errc::not_found for ENOENT, errc::io otherwise.
error os_error(int err, std::string_view what);

// Opens `path` read-only (O_CLOEXEC). Errors name "file <path>".
result<unique_fd> open_read_only(const std::string& path);

// Size in bytes of the open file `fd`; `source` names it in the error.
result<std::uint64_t> file_size(int fd, std::string_view source);

// Reads all of dst from `fd` at `offset`: short reads are resubmitted, EINTR and EAGAIN retried.
// Errors name `source` and the offset at which the failing attempt started; end of file before the
// last byte fails with `at_eof` (errc::format where a short file means a malformed one).
result<void> pread_full(int fd, std::span<std::byte> dst, std::uint64_t offset, std::string_view source,
                        errc at_eof = errc::io);

// Writes all of src to `fd` at `offset` (short writes resubmitted, EINTR retried).
result<void> pwrite_full(int fd, std::span<const std::byte> src, std::uint64_t offset, std::string_view source);

// A file written whole and then published atomically: a temporary file next to `final_path`,
// removed on destruction unless commit() renamed it into place. Errors name the paths.
class atomic_file {
 public:
  static result<atomic_file> create(const std::string& final_path);
  atomic_file(atomic_file&& other) noexcept;
  atomic_file& operator=(atomic_file&&) = delete;
  ~atomic_file();

  int fd() const noexcept { return fd_.get(); }
  const std::string& path() const noexcept { return path_; }
  // Appends all of `bytes` (short writes resubmitted, EINTR retried).
  result<void> write(std::span<const std::byte> bytes);
  // Makes the bytes durable (fsync), renames the file over final_path, syncs the directory entry.
  result<void> commit();

 private:
  atomic_file() = default;
  unique_fd fd_;
  std::string path_;
  std::string final_path_;
};

// Writes `bytes` to `path` through an atomic_file: the old file (if any) or the new one, never a mix.
result<void> write_file_atomically(const std::string& path, std::span<const std::byte> bytes);

// A read-only private mapping of a whole local file (zero-copy access to its bytes). An empty file
// maps to an empty span.
class mapped_file {
 public:
  static result<mapped_file> open(const std::string& path);
  mapped_file(mapped_file&& other) noexcept;
  mapped_file& operator=(mapped_file&& other) = delete;
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file();

  std::span<const std::byte> bytes() const noexcept { return {base_, size_bytes_}; }

 private:
  mapped_file(const std::byte* base, std::size_t size_bytes) noexcept : base_(base), size_bytes_(size_bytes) {}
  const std::byte* base_ = nullptr;
  std::size_t size_bytes_ = 0;
};

}  // namespace tz

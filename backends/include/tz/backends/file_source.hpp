// A local file as a byte source: io_uring reads on the calling worker's ring, optional O_DIRECT.
#pragma once

#include "tz/base/byte_source.hpp"
#include "tz/base/unique_fd.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace tz {

struct file_options {
  // Read the page-aligned middle of each destination span with O_DIRECT (edges and spans whose
  // memory is not at the same offset modulo 4 KiB as the file stay buffered). For cold files:
  // about 3x faster than buffered reads from this disk, and it leaves the page cache alone.
  bool direct = false;
  // Set IOSQE_ASYNC: punt every read to the kernel's io-wq workers instead of trying it inline.
  bool async_punt = false;
};

// Reads a local file through the io_uring ring of whichever io_context runs the reading coroutine
// (see uring_service.hpp), so reads issued from several scheduler workers copy on several cores.
// Falls back to preadv when io_uring is unavailable. read() is safe to call concurrently.
class file_source final : public byte_source {
 public:
  // Opens `path` read-only (and a second O_DIRECT descriptor when options.direct). Fails with
  // errc::not_found / errc::io naming the path and the OS error.
  static result<std::shared_ptr<file_source>> open(const std::string& path, file_options options = {});
  ~file_source() override;
  file_source(const file_source&) = delete;
  file_source& operator=(const file_source&) = delete;

  const std::string& name() const noexcept override { return name_; }
  task<result<std::uint64_t>> size() override;
  task<result<void>> read(std::uint64_t offset_bytes, scatter_list dst) override;

  std::uint64_t size_bytes() const noexcept { return size_bytes_; }
  const std::string& path() const noexcept { return path_; }
  bool direct() const noexcept { return static_cast<bool>(direct_fd_); }
  // Drops the file's pages from the page cache (posix_fadvise DONTNEED), for cold benchmarks.
  result<void> drop_cache() const;

 private:
  file_source(std::string path, unique_fd fd, unique_fd direct_fd, std::uint64_t size_bytes, file_options options);
  task<result<void>> read_with(int fd, std::uint64_t offset_bytes, scatter_list dst);

  std::string path_;
  std::string name_;
  unique_fd fd_;
  unique_fd direct_fd_;  // empty when O_DIRECT is off or refused
  std::uint64_t size_bytes_ = 0;
  file_options options_;
};

}  // namespace tz

// The one errno error, full pread/pwrite loop and whole-file mapping of the project.
#include "tz/posix_io.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tz {

error os_error(int err, std::string_view what) {
  return make_error(err == ENOENT ? errc::not_found : errc::io, std::string(what) + ": " + std::strerror(err));
}

result<unique_fd> open_read_only(const std::string& path) {
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return os_error(errno, "file " + path + ": cannot open");
  return fd;
}

result<std::uint64_t> file_size(int fd, std::string_view source) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return os_error(errno, std::string(source) + ": cannot stat");
  return static_cast<std::uint64_t>(st.st_size);
}

result<void> pread_full(int fd, std::span<std::byte> dst, std::uint64_t offset, std::string_view source,
                        errc at_eof) {
  for (std::size_t done = 0; done < dst.size();) {
    const auto n = ::pread(fd, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) {
      const int err = errno;
      return make_error(errc::io, std::string(source) + ": read failed at offset " + std::to_string(offset + done) +
                                      ": " + std::strerror(err));
    }
    if (n == 0)
      return make_error(at_eof, std::string(source) + ": unexpected end of file at offset " +
                                    std::to_string(offset + done) + " (needed " + std::to_string(dst.size() - done) +
                                    " more bytes)");
    done += static_cast<std::size_t>(n);
  }
  return {};
}

result<void> pwrite_full(int fd, std::span<const std::byte> src, std::uint64_t offset, std::string_view source) {
  for (std::size_t done = 0; done < src.size();) {
    // At most 1 GiB per call: Linux writes no more than 0x7ffff000 bytes at once anyway.
    const auto n = ::pwrite(fd, src.data() + done, std::min<std::size_t>(src.size() - done, 1u << 30),
                            static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      return make_error(errc::io, std::string(source) + ": write failed at offset " + std::to_string(offset + done) +
                                      ": " + std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  return {};
}

result<mapped_file> mapped_file::open(const std::string& path) {
  TZ_TRY(fd, open_read_only(path));
  TZ_TRY(size_bytes, file_size(fd.get(), "file " + path));
  if (size_bytes == 0) return mapped_file(nullptr, 0);
  // The mapping keeps the file open; the descriptor closes on return.
  void* base = ::mmap(nullptr, size_bytes, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (base == MAP_FAILED) return os_error(errno, "file " + path + ": cannot map " + std::to_string(size_bytes) + " bytes");
  return mapped_file(static_cast<const std::byte*>(base), size_bytes);
}

mapped_file::mapped_file(mapped_file&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), size_bytes_(std::exchange(other.size_bytes_, 0)) {}

mapped_file::~mapped_file() {
  if (base_ != nullptr) ::munmap(const_cast<std::byte*>(base_), size_bytes_);
}

}  // namespace tz

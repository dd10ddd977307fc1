// The one errno error, full pread/pwrite loop and whole-file mapping of the project.
#include "tz/base/posix_io.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

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

result<atomic_file> atomic_file::create(const std::string& final_path) {
  std::random_device entropy;
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::uint64_t tag = (std::uint64_t{entropy()} << 32) | entropy();
    atomic_file t;
    t.final_path_ = final_path;
    t.path_ = final_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(tag);
    // 0666 before the umask, like any ordinary file (python's writers included).
    t.fd_.reset(::open(t.path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
    if (t.fd_) return t;
    t.path_.clear();
    if (errno != EEXIST) return os_error(errno, "file " + final_path + ": cannot create a temporary file next to it");
  }
  return os_error(EEXIST, "file " + final_path + ": cannot find a free temporary file name");
}

atomic_file::atomic_file(atomic_file&& other) noexcept
    : fd_(std::move(other.fd_)), path_(std::move(other.path_)), final_path_(std::move(other.final_path_)) {
  other.path_.clear();
}

atomic_file::~atomic_file() {
  fd_.reset();
  if (!path_.empty()) ::unlink(path_.c_str());
}

result<void> atomic_file::write(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t put = ::write(fd_.get(), bytes.data(), bytes.size());
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return os_error(errno, "file " + path_ + ": write");
    if (put == 0) return os_error(EIO, "file " + path_ + ": write made no progress");
    bytes = bytes.subspan(static_cast<std::size_t>(put));
  }
  return {};
}

result<void> atomic_file::commit() {
  if (::fsync(fd_.get()) != 0) return os_error(errno, "file " + path_ + ": fsync");
  if (fd_.close() != 0) return os_error(errno, "file " + path_ + ": close");
  if (::rename(path_.c_str(), final_path_.c_str()) != 0)
    return os_error(errno, "file " + final_path_ + ": rename from " + path_);
  path_.clear();
  std::string dir = std::filesystem::path(final_path_).parent_path().string();
  if (dir.empty()) dir = ".";
  const unique_fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd) return os_error(errno, "file " + final_path_ + ": renamed, but cannot open its directory to sync it");
  if (::fsync(dir_fd.get()) != 0) return os_error(errno, "file " + final_path_ + ": renamed, but syncing its directory failed");
  return {};
}

result<void> write_file_atomically(const std::string& path, std::span<const std::byte> bytes) {
  TZ_TRY(file, atomic_file::create(path));
  TZ_CHECK(file.write(bytes));
  return file.commit();
}

}  // namespace tz

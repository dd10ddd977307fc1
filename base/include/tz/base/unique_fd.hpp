// tz::unique_fd: the owner of one POSIX file descriptor, closed when the owner goes.
#pragma once

#include <unistd.h>

#include <utility>

namespace tz {

// Move-only; -1 means "owns nothing". Every descriptor the project opens is held by one of these,
// so no error path can leak it and none is closed twice.
class unique_fd {
 public:
  unique_fd() noexcept = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  unique_fd(unique_fd&& other) noexcept : fd_(other.release()) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }

  // Gives up ownership: the caller closes the returned descriptor.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }

  // Closes the owned descriptor (if any) and owns `fd` instead.
  void reset(int fd = -1) noexcept {
    const int old = std::exchange(fd_, fd);
    if (old >= 0) ::close(old);
  }

  // Closes now and reports close()'s own result (0, or -1 with errno set): writers must check it,
  // since NFS and full disks report lost writes only there.
  int close() noexcept { return fd_ >= 0 ? ::close(release()) : 0; }

 private:
  int fd_ = -1;
};

}  // namespace tz

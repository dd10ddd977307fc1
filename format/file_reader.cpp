// The simple synchronous .tensors reader over pread.
#include "tz/format/file_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tz::format {
namespace {

error os_error(const std::string& what, const std::string& path, std::uint64_t offset, int err) {
  return make_error(err == ENOENT ? errc::not_found : errc::io,
                    "file " + path + ": " + what + " at offset " + std::to_string(offset) + ": " + std::strerror(err));
}

result<void> pread_all(int fd, const std::string& path, std::uint64_t offset, std::span<std::byte> dst) {
  std::size_t done = 0;
  while (done < dst.size()) {
    const auto n = ::pread(fd, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return os_error("read failed", path, offset + done, errno);
    }
    if (n == 0)
      return make_error(errc::format, "file " + path + ": unexpected end of file at offset " +
                                          std::to_string(offset + done) + " (needed " +
                                          std::to_string(dst.size() - done) + " more bytes)");
    done += static_cast<std::size_t>(n);
  }
  return {};
}

}  // namespace

// Closes its descriptor when the last copy of the read function goes away.
struct shared_fd {
  explicit shared_fd(int f) : fd(f) {}
  shared_fd(const shared_fd&) = delete;
  shared_fd& operator=(const shared_fd&) = delete;
  ~shared_fd() { ::close(fd); }
  int fd;
};

result<file_reader> file_reader::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return os_error("cannot open", path, 0, errno);
  auto owner = std::make_shared<shared_fd>(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return os_error("cannot stat", path, 0, errno);
  auto read = [owner, path](std::uint64_t offset, std::span<std::byte> dst) {
    return pread_all(owner->fd, path, offset, dst);
  };
  return open(std::move(read), static_cast<std::uint64_t>(st.st_size), "file " + path);
}

result<file_reader> file_reader::open(read_at_fn read_at, std::uint64_t size, std::string source) {
  std::vector<std::byte> prefix(std::min<std::uint64_t>(size, file_prefix_bytes));
  TZ_CHECK(read_at(0, prefix));
  if (prefix.size() < file_prefix_bytes && prefix.size() >= magic_bytes) {
    TZ_CHECK(parse_file_header(prefix, size, source));  // reports a bad magic first
    return make_error(errc::format, source + ": file too small (" + std::to_string(size) +
                                        " bytes) for the 73-byte tensorizer header");
  }
  TZ_TRY(header, parse_file_header(prefix, size, source));
  std::vector<std::byte> metadata(header.metadata_bytes);  // bounded by parse_file_header
  TZ_CHECK(read_at(file_prefix_bytes, metadata));
  TZ_TRY(index, parse_index(header, metadata, size, std::move(source)));
  return file_reader(std::move(read_at), std::move(index));
}

result<tensor_header> file_reader::read_header(std::size_t i) const {
  const auto& e = index_.tensors.at(i);
  std::vector<std::byte> bytes(e.header_bytes());  // bounded by parse_index
  TZ_CHECK(read_at(e.header_offset, bytes));
  return parse_tensor_header(bytes, index_.header, e, index_.source);
}

result<void> file_reader::read_data(std::size_t i, std::span<std::byte> dst) const {
  const auto& e = index_.tensors.at(i);
  if (dst.size() != e.data_length)
    return make_error(errc::invalid_argument, index_.source + ": tensor '" + display_name(e.path) + "' needs " +
                                                  std::to_string(e.data_length) + " bytes, got a buffer of " +
                                                  std::to_string(dst.size()));
  return read_at(e.data_offset, dst);
}

}  // namespace tz::format

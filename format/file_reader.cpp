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

result<file_reader> file_reader::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return os_error("cannot open", path, 0, errno);
  file_reader reader(fd, {});  // owns fd from here on
  struct stat st {};
  if (::fstat(fd, &st) != 0) return os_error("cannot stat", path, 0, errno);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  const std::string source = "file " + path;
  std::vector<std::byte> prefix(std::min<std::uint64_t>(size, file_prefix_bytes));
  TZ_CHECK(pread_all(fd, path, 0, prefix));
  if (prefix.size() < file_prefix_bytes && prefix.size() >= magic_bytes) {
    TZ_CHECK(parse_file_header(prefix, size, source));  // reports a bad magic first
    return make_error(errc::format, source + ": file too small (" + std::to_string(size) +
                                        " bytes) for the 73-byte tensorizer header");
  }
  TZ_TRY(header, parse_file_header(prefix, size, source));
  std::vector<std::byte> metadata(header.metadata_bytes);  // bounded by parse_file_header
  TZ_CHECK(pread_all(fd, path, file_prefix_bytes, metadata));
  TZ_TRY(index, parse_index(header, metadata, size, source));
  reader.index_ = std::move(index);
  return reader;
}

file_reader::file_reader(file_reader&& o) noexcept : fd_(std::exchange(o.fd_, -1)), index_(std::move(o.index_)) {}

file_reader& file_reader::operator=(file_reader&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    index_ = std::move(o.index_);
  }
  return *this;
}

file_reader::~file_reader() {
  if (fd_ >= 0) ::close(fd_);
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

result<void> file_reader::read_at(std::uint64_t offset, std::span<std::byte> dst) const {
  return pread_all(fd_, index_.source.substr(5), offset, dst);
}

}  // namespace tz::format

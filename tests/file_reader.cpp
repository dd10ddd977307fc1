// The test helper file_reader.hpp: a synchronous .tensors reader over pread.
#include "file_reader.hpp"
#include "tz/base/posix_io.hpp"

#include <memory>

namespace tz::format {

result<file_reader> file_reader::open(const std::string& path) {
  TZ_TRY(fd, open_read_only(path));
  const std::string source = "file " + path;
  TZ_TRY(size_bytes, file_size(fd.get(), source));
  // The descriptor closes when the last copy of the read function goes away.
  auto owner = std::make_shared<unique_fd>(std::move(fd));
  auto read = [owner, source](std::uint64_t offset, std::span<std::byte> dst) {
    return pread_full(owner->get(), dst, offset, source, errc::format);
  };
  return open(std::move(read), size_bytes, source);
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

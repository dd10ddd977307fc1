// A simple synchronous .tensors reader over pread: the reference path for the CLI and the tests.
// The engine (engine/) is the fast path; both share the parsing functions of tensorizer.hpp.
#pragma once

#include "tz/error.hpp"
#include "tz/format/tensorizer.hpp"

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace tz::format {

class file_reader {
 public:
  // Opens a local file and reads + validates its prefix and metadata index.
  static result<file_reader> open(const std::string& path);

  file_reader(file_reader&&) noexcept;
  file_reader& operator=(file_reader&&) noexcept;
  ~file_reader();

  const file_index& index() const noexcept { return index_; }

  // Reads and parses tensor i's header (checked against its metadata entry).
  result<tensor_header> read_header(std::size_t i) const;

  // Reads tensor i's stored data bytes (ciphertext for encrypted files) into dst, which must be
  // exactly data_length bytes.
  result<void> read_data(std::size_t i, std::span<std::byte> dst) const;

  // Reads bytes [offset, offset + dst.size()) of the file.
  result<void> read_at(std::uint64_t offset, std::span<std::byte> dst) const;

 private:
  file_reader(int fd, file_index index) : fd_(fd), index_(std::move(index)) {}
  int fd_ = -1;
  file_index index_;
};

}  // namespace tz::format

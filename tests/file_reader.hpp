// A test helper: a plain synchronous .tensors reader over pread, the independent path the format
// tests check the parsers with (the engine's loader is the one way the project walks a file; both
// share the parsing functions of tensorizer.hpp). It reads through a positional-read function, so a
// local file or an in-memory fake with injected faults can feed it.
#pragma once

#include "tz/base/error.hpp"
#include "tz/format/tensorizer.hpp"

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tz::format {

// Reads exactly dst.size() bytes at an absolute offset, or fails naming the source and offset.
using read_at_fn = std::function<result<void>(std::uint64_t offset_bytes, std::span<std::byte> dst)>;

class file_reader {
 public:
  // Opens a local file and reads + validates its prefix and metadata index.
  static result<file_reader> open(const std::string& path);
  // Reads + validates the prefix and index of an object of size_bytes read through read_at;
  // `source` names it in errors ("https://host/model.tensors").
  static result<file_reader> open(read_at_fn read_at, std::uint64_t size_bytes, std::string source);

  const file_index& index() const noexcept { return index_; }

  // Reads and parses tensor i's header (checked against its metadata entry).
  result<tensor_header> read_header(std::size_t i) const;

  // Reads tensor i's stored data bytes (ciphertext for encrypted files) into dst, which must be
  // exactly data_length bytes.
  result<void> read_data(std::size_t i, std::span<std::byte> dst) const;

  // Reads bytes [offset, offset + dst.size()) of the file.
  result<void> read_at(std::uint64_t offset, std::span<std::byte> dst) const { return read_at_(offset, dst); }

 private:
  file_reader(read_at_fn read_at, file_index index) : read_at_(std::move(read_at)), index_(std::move(index)) {}
  read_at_fn read_at_;
  file_index index_;
};

}  // namespace tz::format

// Writes .tensors files byte-identical to tensorizer 2.11.1 for the same tensors in the same order
// (and to 2.12.1 for files with a dimension >= 2^32, which need data version 5).
#pragma once

#include "tz/base/error.hpp"
#include "tz/format/tensorizer.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tz::format {

// One tensor to write. `data` is the dense C-order plaintext (empty for zero-size and meta tensors).
struct tensor_write {
  tensor_path path;
  tensor_type type = tensor_type::state_dict;
  std::uint16_t module_index = 0;
  dtype_info dtype;
  std::vector<std::uint64_t> shape;
  std::span<const std::byte> data;
  bool meta = false;  // a data-less tensor that loads as zeros (raises the version to 4)
  // Dimensions >= 2^32 raise the version to 5 (format/FORMAT.md §16.1).
};

// Encrypts tensor data for the writer (implemented in crypto terms by the caller; see tools/).
// The 73-byte file prefix of a header (reserved bytes zero), as the writer stores it.
std::vector<std::byte> encode_file_header(const file_header& header);

// Appends one metadata-index entry as stored in a file whose flag bit 1 is `tagged` (then the entry
// starts with its u32 metadata_version, and a version of 5 stores 8-byte dimensions). The exact
// inverse of parse_index for one entry.
void append_index_entry(std::vector<std::byte>& out, const tensor_entry& entry, bool tagged);

class tensor_encryptor {
 public:
  virtual ~tensor_encryptor() = default;
  // Encrypts `data` in place and returns the crypt-info body (the bytes after the u64 length).
  virtual result<std::vector<std::byte>> encrypt(std::span<std::byte> data) = 0;
  // Size in bytes of the crypt-info body encrypt() will return for data of this length.
  virtual std::uint64_t crypt_info_bytes(std::uint64_t data_bytes) const = 0;
};

struct writer_options {
  tensor_encryptor* encryptor = nullptr;  // non-null: write an encrypted (v3 / v4+flag) file
};

// Where a stream writer puts its bytes: positional writes into a byte stream that the file starts
// at offset 0 of (a caller's open file or file object, at whatever offset it chose).
class write_sink {
 public:
  virtual ~write_sink() = default;
  // Writes all of `bytes` at `offset`; errors name the stream.
  virtual result<void> write_at(std::uint64_t offset, std::span<const std::byte> bytes) = 0;
};

// Two ways to write a file:
// - create(path): atomically. A temporary file in the same directory, renamed over `path` by
//   close(). Destroying an unclosed writer removes the temporary file and leaves `path` untouched.
// - create(sink): into the caller's stream as the tensors are written, as tensorizer 2.11.1 does.
//   After every write() the stream holds a complete file (header, index and end marker brought up
//   to date), so a stream its owner closes without closing the writer loses nothing.
class tensor_writer {
 public:
  static result<tensor_writer> create(const std::string& path, writer_options options = {});
  // `name` names the stream in errors.
  static result<tensor_writer> create(std::unique_ptr<write_sink> sink, std::string name, writer_options options = {});
  tensor_writer(tensor_writer&&) noexcept;
  tensor_writer& operator=(tensor_writer&&) noexcept;
  ~tensor_writer();

  // Appends one tensor. A dimension >= 2^32 makes the file data version 5 with tagged metadata
  // entries, as tensorizer 2.12 writes it. Fails on a conflicting path, an element count whose
  // byte size overflows 64 bits, a metadata overflow (256 KiB), or I/O.
  result<void> write(const tensor_write& t);
  // Finishes the file (header, end marker); a path is fsynced and renamed into place.
  result<void> close();

  // Bytes the file takes so far, end marker included (what close() leaves).
  std::uint64_t size() const noexcept;

  std::uint32_t version() const noexcept;

 private:
  struct state;
  explicit tensor_writer(std::unique_ptr<state> s);
  std::unique_ptr<state> state_;
};

}  // namespace tz::format

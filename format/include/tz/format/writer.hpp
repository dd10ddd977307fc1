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

// Writes to `path` atomically: a temporary file in the same directory, renamed over `path` by
// close(). Destroying an unclosed writer removes the temporary file and leaves `path` untouched.
class tensor_writer {
 public:
  static result<tensor_writer> create(const std::string& path, writer_options options = {});
  tensor_writer(tensor_writer&&) noexcept;
  tensor_writer& operator=(tensor_writer&&) noexcept;
  ~tensor_writer();

  // Appends one tensor. A dimension >= 2^32 makes the file data version 5 with tagged metadata
  // entries, as tensorizer 2.12 writes it. Fails on a conflicting path, an element count whose
  // byte size overflows 64 bits, a metadata overflow (256 KiB), or I/O.
  result<void> write(const tensor_write& t);
  // Finishes the file (header, end marker), fsyncs and renames it into place.
  result<void> close();

  std::uint32_t version() const noexcept;

 private:
  struct state;
  explicit tensor_writer(std::unique_ptr<state> s);
  std::unique_ptr<state> state_;
};

}  // namespace tz::format

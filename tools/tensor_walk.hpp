// Walks every tensor of a .tensors file in file order: header, plaintext bytes, stored hashes checked.
#pragma once

#include "tz/format/encryption.hpp"
#include "tz/format/file_reader.hpp"

#include <functional>
#include <span>

namespace tz::cli {

struct walk_options {
  bool verify = true;                                // check the stored CRC32 / SHA-256 of every tensor
  const format::decryption* decryption = nullptr;    // required for encrypted files
};

// Calls visit(i, entry, header, plaintext) for each tensor (decrypted first when encrypted). Data-less (meta, zero-size) tensors
// get an empty span. Stops at the first error from the file or from visit.
using tensor_visitor = std::function<result<void>(std::size_t, const format::tensor_entry&,
                                                  const format::tensor_header&, std::span<const std::byte>)>;
result<void> walk_tensors(const format::file_reader& reader, const walk_options& options, const tensor_visitor& visit);

}  // namespace tz::cli

// safetensors: header parsing and validation, dtype mapping to .tensors dtypes, and an atomic writer.
#pragma once

#include "tz/base/error.hpp"
#include "tz/format/dtype.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tz::format {

// The largest JSON header accepted or written: the python library's own limit (100,000,000 bytes,
// not 100 MiB), so that every file this reader accepts also loads in python.
inline constexpr std::uint64_t st_header_max_bytes = 100'000'000;

// The "__metadata__" string map, in the order of the file (or of the caller, for the writer).
using st_metadata = std::vector<std::pair<std::string, std::string>>;

// A dtype code of safetensors 0.8 and what it means.
struct st_dtype {
  std::string_view code;   // "F32", "BF16", "F8_E4M3", "F4", ...
  unsigned bits = 0;       // bits per element: 4 (F4) and 6 (F6_*) are packed, the rest 8 * itemsize
  std::string_view torch;  // the torch dtype name, e.g. "torch.float8_e4m3fn"; empty for F6_*
  unsigned rank = 0;       // position in the library's Dtype enum; the writer sorts by it
};

// One tensor of a parsed header. Offsets are absolute file offsets (the JSON stores them relative
// to the first byte after the header).
struct st_tensor {
  std::string name;
  std::string dtype;                  // safetensors code, e.g. "F32"
  std::vector<std::uint64_t> shape;   // empty for a 0-d tensor
  std::uint64_t data_begin = 0;
  std::uint64_t data_end = 0;
  std::uint64_t size_bytes() const noexcept { return data_end - data_begin; }
};

// A validated header: every tensor's bytes lie inside the file, no two overlap, and together they
// cover the data buffer exactly (no holes, nothing trailing).
struct st_index {
  std::uint64_t header_bytes = 0;  // N: the JSON length including its space padding
  std::vector<st_tensor> tensors;  // sorted by data offset (then by name among zero-size tensors)
  st_metadata metadata;            // empty when the file has none
  // First byte of the data buffer.
  std::uint64_t data_offset_bytes() const noexcept { return 8 + header_bytes; }
  // The tensor with this name, or nullptr. A linear scan: build a map when looking up many.
  const st_tensor* find(std::string_view name) const noexcept;
};

// Looks up a dtype code (case-sensitive). Fails with errc::format for a code safetensors lacks.
result<st_dtype> find_st_dtype(std::string_view code);

// Bytes of a tensor of this dtype and shape (elements x bits / 8; 1 element for shape []). Fails
// with errc::format for an unknown code, an overflow of 64 bits, or a packed sub-byte tensor whose
// bits do not fill whole bytes (python refuses those too).
result<std::uint64_t> st_tensor_bytes(std::string_view code, std::span<const std::uint64_t> shape);

// Decodes the 8-byte little-endian header length of a file of `file_bytes` bytes. Fails with
// errc::format when it is zero, over st_header_max_bytes, or runs past the end of the file.
// `source` names the file in messages ("file /models/a.safetensors").
result<std::uint64_t> st_header_length(std::span<const std::byte, 8> first8, std::uint64_t file_bytes,
                                       std::string_view source);

// Parses and validates the JSON header (the N bytes after the length; `json.size()` is N) of a
// file of `file_bytes` bytes. Pure: any byte source can feed it. Accepts what safetensors 0.8
// accepts: JSON whitespace around the object (the writer pads with spaces), an absent or null
// "__metadata__", unknown fields inside a tensor entry (ignored). A repeated key keeps its last
// value, as in python. Fails with errc::format naming the source, the tensor, the offsets and the
// expected and actual values: invalid UTF-8 or JSON, a non-object, an unknown dtype, a shape that
// is not a list of non-negative integers or whose byte size overflows, data_offsets past the data
// buffer or not matching shape x dtype, overlapping tensors, or bytes that belong to no tensor.
result<st_index> parse_safetensors_header(std::span<const std::byte> json, std::uint64_t file_bytes,
                                          std::string_view source);

// Reads and validates the header of a local file with pread: the reference path for the CLI and
// the tests (the engine reads headers through its byte sources). Fails with errc::io when the file
// cannot be opened or read, errc::format as parse_safetensors_header does.
result<st_index> read_safetensors_index(const std::string& path);

// The .tensors dtype for a safetensors code (BF16 -> "<V2\0torch.bfloat16", BOOL -> "|b1").
// Fails with errc::format for an unknown code and errc::unsupported for the packed sub-byte codes
// (F4 counts 4-bit elements, torch.float4_e2m1fn_x2 counts bytes; F6_* have no torch dtype).
result<dtype_info> st_dtype_to_tensorizer(std::string_view st_code);

// The safetensors code for a .tensors dtype. Fails with errc::unsupported for dtypes safetensors
// cannot store (complex32, complex128, bits*, quantized, float4_e2m1fn_x2).
result<std::string> tensorizer_dtype_to_st(const dtype_info& dtype);

// One tensor to write: dense C-order bytes, exactly elements x bits / 8 of them. The data is only
// borrowed for the duration of the call.
struct st_write_tensor {
  std::string name;
  std::string dtype;  // safetensors code
  std::vector<std::uint64_t> shape;
  std::span<const std::byte> data;
};

// Where everything goes in a file about to be written.
struct st_layout {
  std::string header;              // the 8-byte length, the JSON, the space padding
  std::vector<std::size_t> order;  // indices into the tensors, in the order their data follows
  std::uint64_t file_bytes = 0;
};

// Lays out a file the way the python library (safetensors 0.8 `save_file`) does: tensors sorted
// by dtype rank descending, then by name (bytewise); data packed back to back in that order;
// "__metadata__" first when `metadata` is non-empty, in the caller's order; compact JSON with
// serde_json's escaping; spaces pad the JSON to a multiple of 8 bytes. The result is
// byte-identical to python's file for the same tensors when metadata has at most one entry
// (python keeps metadata in a hash map, so its order of two or more entries varies from run to
// run) and is non-empty (python writes "__metadata__":{} for an empty dict, we write nothing).
// Fails with errc::invalid_argument naming the tensor: a duplicate or "__metadata__" name, invalid
// UTF-8, an unknown dtype, data whose size does not match shape x dtype, a header over the limit.
result<st_layout> plan_safetensors(std::span<const st_write_tensor> tensors, const st_metadata& metadata);

// Writes a safetensors file atomically: a temporary file in the same directory, fsynced, renamed
// over `path`, then the directory fsynced. Completes when the file is durable. On any failure the
// temporary file is removed and `path` is untouched. Fails as plan_safetensors does, or with
// errc::io naming the path, the operation and the OS error (errc::not_found: no such directory).
result<void> write_safetensors(const std::string& path, std::span<const st_write_tensor> tensors,
                               const st_metadata& metadata = {});

}  // namespace tz::format

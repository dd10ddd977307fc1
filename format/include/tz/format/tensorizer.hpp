// The .tensors layout (tensorizer data versions 1-5): file header, metadata index, tensor headers.
// Pure functions on bytes: no I/O here, so every byte source and the engine can use them.
#pragma once

#include "tz/base/error.hpp"
#include "tz/format/dtype.hpp"
#include "tz/format/tensor_path.hpp"
#include "tz/crypto/hash.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tz::format {

inline constexpr std::uint64_t magic_bytes = 5;              // "|TZR|"
inline constexpr std::uint64_t file_prefix_bytes = 73;       // magic + header + u64 metadata_len
inline constexpr std::uint64_t python_metadata_bytes = 262144;
inline constexpr std::uint32_t max_data_version = 5;
// Feature flags (format/FORMAT.md §3): bit 0 since data version 4, bit 1 since tensorizer 2.12.
inline constexpr std::uint64_t flag_encrypted = 1;
inline constexpr std::uint64_t flag_versioned_headers = 2;  // every metadata entry starts with a u32 tag
inline constexpr std::uint64_t known_flags = flag_encrypted | flag_versioned_headers;
// Dimensions from here on are stored as u64 (data version 5, metadata tag 5).
inline constexpr std::uint64_t long_dimension_min = 1ull << 32;
// Caps on sizes read from a file before anything is allocated for them.
inline constexpr std::uint64_t max_metadata_bytes = 256ull << 20;
inline constexpr std::uint64_t max_tensor_header_bytes = 64ull << 20;

enum class tensor_type : std::uint8_t { param = 0, buffer = 1, state_dict = 2 };
const char* tensor_type_name(tensor_type t) noexcept;  // "param", "buffer", "state_dict"

enum class hash_kind : std::uint8_t { crc32 = 0, sha256 = 1 };

// The 73-byte file prefix.
struct file_header {
  std::uint32_t version = 0;
  std::uint64_t flags = 0;          // bit 0: encrypted (v4+); bit 1: versioned_headers (v5)
  std::uint64_t tensor_size = 0;    // sum of data lengths (not the file size)
  std::uint64_t tensor_count = 0;
  std::uint64_t metadata_bytes = 0;
  // Whether every tensor header carries a crypt-info block (v3, or v4+ with flag bit 0).
  bool has_crypt_info() const noexcept { return version == 3 || (version >= 4 && (flags & flag_encrypted)); }
  // Whether every metadata entry starts with a u32 tag (1: u32 dimensions, 5: u64 dimensions).
  // tensorizer 2.12 decides this by flag bit 1 alone, not by the version (format/FORMAT.md §16.1).
  bool has_tagged_metadata() const noexcept { return (flags & flag_versioned_headers) != 0; }
};

// One metadata entry: what the index says about a tensor.
struct tensor_entry {
  std::string name;                 // the stored name bytes
  tensor_path path;                 // decoded
  tensor_type type = tensor_type::param;
  dtype_info dtype;
  std::vector<std::uint64_t> shape;
  std::uint32_t metadata_version = 1;  // per-entry tag: 1 (u32 dims) or 5 (u64 dims, here and in its header)
  std::uint64_t header_offset = 0;
  std::uint64_t data_offset = 0;
  std::uint64_t data_length = 0;
  std::uint64_t element_count = 0;
  std::uint64_t deserialized_bytes = 0;  // element_count * itemsize: what a load yields

  std::uint64_t header_bytes() const noexcept { return data_offset - header_offset; }
  std::uint64_t end_offset() const noexcept { return data_offset + data_length; }
  // Data-less tensor with elements: loads as zeros (format/FORMAT.md §7.4).
  bool is_meta() const noexcept { return data_length == 0 && deserialized_bytes > 0; }
};

struct file_index {
  std::string source;       // for error messages
  file_header header;
  std::vector<tensor_entry> tensors;  // metadata order == file order
  std::uint64_t file_bytes = 0;
  // safetensors: the "__metadata__" string map, in file order (.tensors files have none).
  std::vector<std::pair<std::string, std::string>> st_metadata;
};

struct stored_hash {
  hash_kind kind = hash_kind::sha256;
  std::size_t value_offset = 0;  // offset of the value within the header bytes
  std::vector<std::uint8_t> value;
};

// Crypt-info (format/FORMAT.md §9.4), parsed; decryption lives in crypto/.
struct kdf_chunk {
  std::uint64_t opslimit = 0;
  std::uint64_t memlimit = 0;
  std::int32_t alg = 0;
  std::vector<std::uint8_t> salt;
};
struct cipher_chunk {
  bool sequential = false;           // type 3: one MAC over the whole data
  std::uint64_t chunk_bytes = 0;     // type 2
  std::array<std::uint8_t, 24> nonce{};
  std::vector<std::array<std::uint8_t, 16>> macs;
};
struct crypt_info {
  std::optional<kdf_chunk> kdf;
  std::optional<cipher_chunk> cipher;  // absent for data-less tensors
};

// A parsed per-tensor header.
struct tensor_header {
  std::uint64_t header_bytes = 0;
  std::uint16_t module_index = 0;
  tensor_type type = tensor_type::param;
  std::string name;
  dtype_info dtype;
  std::vector<std::uint64_t> shape;
  std::vector<stored_hash> hashes;
  std::optional<crypt_info> crypt;
  std::size_t crypt_begin = 0, crypt_end = 0;  // byte range of the crypt block (u64 prefix included)
  std::uint64_t data_length = 0;
  std::uint64_t data_offset = 0;  // in the file (from the index entry), for messages
  // H of format/FORMAT.md §8.2: the header with hash values zeroed and the crypt block cut out.
  std::vector<std::byte> hash_prefix;
};

// Parses the 73-byte prefix; checks magic, version, flags (bit 1 only with version 5), and that
// metadata fits in the file.
result<file_header> parse_file_header(std::span<const std::byte> prefix, std::uint64_t file_bytes,
                                      std::string_view source);

// Parses the metadata block (the metadata_bytes after the prefix) into an index. Checks every entry
// (dtype, shape overflow, offsets inside the file, entries in file order without overlap, names
// decodable and not conflicting) and reports the offset of the first bad field.
result<file_index> parse_index(const file_header& header, std::span<const std::byte> metadata,
                               std::uint64_t file_bytes, std::string source);

// Parses a tensor's header bytes (file[header_offset, data_offset)) and checks it against its entry.
result<tensor_header> parse_tensor_header(std::span<const std::byte> bytes, const file_header& fh,
                                          const tensor_entry& entry, std::string_view source);

// Parses a crypt-info body (the bytes after its u64 length; FORMAT.md §9.4) found at `base_offset`
// of the file. Fails with errc::format naming the field and its offset.
result<crypt_info> parse_crypt_info(std::span<const std::byte> body, std::uint64_t base_offset,
                                    std::string_view source);

// Checks the stored CRC32 / SHA-256 of a tensor against its plaintext data (empty for data-less
// tensors). Fails with errc::hash_mismatch naming the tensor, the algorithm and both values.
result<void> verify_tensor(const tensor_header& header, std::span<const std::byte> plaintext,
                           std::string_view source);

// Checks a tensor's stored hashes against the CRC32 and SHA-256 of its hash input (the header's
// hash prefix followed by the plaintext data), computed by the caller in any way it likes (e.g.
// CRC32 per piece, combined). A hash passed as nullopt is not checked here (the caller checks it
// elsewhere: a device load's CRC32 on the GPU). Same failures as verify_tensor.
result<void> check_tensor_hashes(const tensor_header& header, std::optional<std::uint32_t> crc,
                                 const std::optional<sha256_digest>& sha, std::string_view source);

// Whether the tensor stores a CRC32 (hash_type 0).
bool has_crc32(const tensor_header& header) noexcept;

// Incremental form of verify_tensor for data that arrives in pieces, in order.
class tensor_verifier {
 public:
  explicit tensor_verifier(const tensor_header& header);
  void update(std::span<const std::byte> bytes) noexcept;
  result<void> finish(std::string_view source);

 private:
  const tensor_header* header_;
  crc32_hasher crc_;
  sha256_hasher sha_;
};

}  // namespace tz::format

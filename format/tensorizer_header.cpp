// Parsing per-tensor headers (incl. crypt-info) and verifying the CRC32 / SHA-256 they store.
#include "byte_cursor.hpp"
#include "tz/format/tensorizer.hpp"

#include <algorithm>

namespace tz::format {
namespace {

result<kdf_chunk> parse_kdf(byte_cursor& c) {
  TZ_TRY(method, c.uint(2, "derivation_method"));
  if (method != 1) return c.fail("derivation_method", "unknown key derivation method " + std::to_string(method));
  kdf_chunk k;
  TZ_TRY(ops, c.uint(8, "opslimit"));
  TZ_TRY(mem, c.uint(8, "memlimit"));
  TZ_TRY(alg, c.uint(4, "alg"));
  TZ_TRY(salt_len, c.uint(2, "salt_len"));
  if (salt_len != 16) return c.fail("salt_len", "expected a 16-byte salt, got " + std::to_string(salt_len));
  TZ_TRY(salt, c.take(salt_len, "salt"));
  k.opslimit = ops;
  k.memlimit = mem;
  k.alg = static_cast<std::int32_t>(static_cast<std::uint32_t>(alg));
  for (auto b : salt) k.salt.push_back(std::to_integer<std::uint8_t>(b));
  return k;
}

result<cipher_chunk> parse_cipher(byte_cursor& c, bool sequential) {
  cipher_chunk x;
  x.sequential = sequential;
  if (!sequential) {
    TZ_TRY(chunk_bytes, c.uint(8, "chunk_size"));
    if (chunk_bytes < 1024 || chunk_bytes % 64 != 0)
      return c.fail("chunk_size", "chunk size " + std::to_string(chunk_bytes) + " is not a multiple of 64 >= 1024");
    x.chunk_bytes = chunk_bytes;
  }
  TZ_TRY(nonce, c.take(24, "nonce"));
  std::memcpy(x.nonce.data(), nonce.data(), 24);
  std::uint64_t macs = 1;
  if (!sequential) {
    TZ_TRY(n, c.uint(8, "num_macs"));
    if (n > c.remaining() / 16) return c.fail("num_macs", std::to_string(n) + " MACs do not fit in the block");
    macs = n;
  }
  for (std::uint64_t i = 0; i < macs; ++i) {
    TZ_TRY(mac, c.take(16, "mac"));
    auto& m = x.macs.emplace_back();
    std::memcpy(m.data(), mac.data(), 16);
  }
  return x;
}

}  // namespace

result<crypt_info> parse_crypt_info(std::span<const std::byte> body, std::uint64_t base_offset,
                                    std::string_view source) {
  byte_cursor c(body, base_offset, source, "crypt-info");
  crypt_info info;
  TZ_TRY(count, c.uint(2, "chunk_count"));
  for (std::uint64_t i = 0; i < count; ++i) {
    TZ_TRY(chunk_len, c.uint(8, "chunk_len"));
    if (chunk_len < 2 || chunk_len > c.remaining()) return c.fail("chunk_len", "chunk runs past the crypt block");
    TZ_TRY(chunk, c.take(chunk_len, "chunk"));
    byte_cursor cc(chunk, c.offset() - chunk_len, source, "crypt-info chunk");
    TZ_TRY(type, cc.uint(2, "chunk_type"));
    if (type == 1) {
      TZ_TRY(k, parse_kdf(cc));
      info.kdf = std::move(k);
    } else if (type == 2 || type == 3) {
      if (info.cipher) return cc.fail("chunk_type", "could not interpret the encryption method: two cipher chunks");
      TZ_TRY(x, parse_cipher(cc, type == 3));
      info.cipher = std::move(x);
    } else {
      return cc.fail("chunk_type", "unknown crypt-info chunk type " + std::to_string(type));
    }
  }
  return info;
}

namespace {

error header_mismatch(std::string_view source, const tensor_entry& e, const char* field, const std::string& expected,
                      const std::string& actual) {
  return make_error(errc::format, std::string(source) + ": tensor '" + display_name(e.path) + "' header at offset " +
                                      std::to_string(e.header_offset) + " disagrees with the metadata: " + field +
                                      " expected " + expected + ", got " + actual);
}

std::string shape_text(const std::vector<std::uint64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
  return t + "]";
}

// Checks the header's fields against the metadata entry and the crypt block against the file mode.
result<void> check_against_entry(const tensor_header& h, const file_header& fh, const tensor_entry& e,
                                 std::string_view source) {
  if (h.name != e.name) return header_mismatch(source, e, "name", e.name, h.name);
  if (h.dtype.stored != e.dtype.stored) return header_mismatch(source, e, "dtype", e.dtype.numpy, h.dtype.numpy);
  if (h.shape != e.shape) return header_mismatch(source, e, "shape", shape_text(e.shape), shape_text(h.shape));
  if (h.data_length != e.data_length)
    return header_mismatch(source, e, "data_length", std::to_string(e.data_length), std::to_string(h.data_length));
  if (h.type != tensor_type::state_dict && e.path.structured())
    return make_error(errc::format, std::string(source) + ": tensor '" + display_name(e.path) +
                                        "': structured tensor paths are only allowed for state-dict tensors");
  if (fh.has_crypt_info() && e.data_length > 0 && !(h.crypt && h.crypt->cipher))
    return make_error(errc::crypto, std::string(source) + ": tensor '" + display_name(e.path) +
                                        "' is not encrypted in an encrypted file");
  if (h.crypt && h.crypt->cipher && !h.crypt->cipher->sequential) {
    const auto& x = *h.crypt->cipher;
    // ceil(data_length / chunk_bytes) without the overflow of (data_length + chunk_bytes - 1) for a
    // chunk size near 2^64, which would let a MAC-less block pass for a non-empty tensor.
    const std::uint64_t want = e.data_length / x.chunk_bytes + (e.data_length % x.chunk_bytes != 0);
    if (x.macs.size() != want)
      return header_mismatch(source, e, "num_macs", std::to_string(want), std::to_string(x.macs.size()));
  }
  return {};
}

}  // namespace

result<tensor_header> parse_tensor_header(std::span<const std::byte> bytes, const file_header& fh,
                                          const tensor_entry& entry, std::string_view source) {
  byte_cursor c(bytes, entry.header_offset, source, "header of tensor '" + display_name(entry.path) + "'");
  tensor_header h;
  TZ_TRY(header_size, c.uint(8, "header_size"));
  if (header_size != bytes.size())
    return c.fail("header_size", "expected " + std::to_string(bytes.size()) + " (data_offset - header_offset), got " +
                                     std::to_string(header_size));
  h.header_bytes = header_size;
  TZ_TRY(module_index, c.uint(2, "module_idx"));
  TZ_TRY(type, c.uint(1, "tensor_type"));
  if (type > 2) return c.fail("tensor_type", "unknown tensor type " + std::to_string(type));
  h.module_index = static_cast<std::uint16_t>(module_index);
  h.type = static_cast<tensor_type>(type);
  TZ_TRY(name_len, c.uint(2, "name_len"));
  TZ_TRY(name, c.string(name_len, "name"));
  h.name = std::move(name);
  TZ_TRY(dtype_len, c.uint(1, "dtype_len"));
  TZ_TRY(dtype, c.string(dtype_len, "dtype"));
  auto d = parse_dtype(dtype);
  if (!d) return c.fail("dtype", d.error().message);
  h.dtype = std::move(*d);
  TZ_TRY(shape, read_shape(c, entry.metadata_version == 5 ? 8 : 4));
  h.shape = std::move(shape);
  TZ_TRY(section_len, c.uint(2, "hash_section_len"));
  const std::size_t section_end = c.pos() + section_len;
  if (section_len > c.remaining()) return c.fail("hash_section_len", "hash section runs past the header");
  TZ_TRY(hash_count, c.uint(1, "hash_count"));
  for (std::uint64_t i = 0; i < hash_count; ++i) {
    TZ_TRY(kind, c.uint(1, "hash_type"));
    TZ_TRY(len, c.uint(1, "hash_len"));
    if (kind > 1) return c.fail("hash_type", "unknown hash type " + std::to_string(kind));
    if (len != (kind == 0 ? 4u : 32u)) return c.fail("hash_len", "bad hash length " + std::to_string(len));
    stored_hash sh{static_cast<hash_kind>(kind), c.pos(), {}};
    TZ_TRY(value, c.take(len, "hash_value"));
    for (auto b : value) sh.value.push_back(std::to_integer<std::uint8_t>(b));
    h.hashes.push_back(std::move(sh));
  }
  if (c.pos() > section_end) return c.fail("hash_section_len", "hashes run past the declared section");
  c.seek(section_end);
  if (fh.has_crypt_info()) {
    h.crypt_begin = c.pos();
    TZ_TRY(crypt_len, c.uint(8, "crypt_info_len"));
    if (crypt_len > c.remaining()) return c.fail("crypt_info_len", "crypt block runs past the header");
    TZ_TRY(body, c.take(crypt_len, "crypt_info"));
    TZ_TRY(info, parse_crypt_info(body, c.offset() - crypt_len, source));
    if (info.kdf || info.cipher) h.crypt = std::move(info);
    h.crypt_end = c.pos();
  }
  if (c.remaining() < 8) return c.fail("data_length", "header too short for data_length");
  c.seek(bytes.size() - 8);
  TZ_TRY(data_length, c.uint(8, "data_length"));
  if (data_length >> 63) return c.fail("data_length", "negative data length");
  h.data_length = data_length;
  h.data_offset = entry.data_offset;
  TZ_CHECK(check_against_entry(h, fh, entry, source));
  // H (format/FORMAT.md §8.2): the header with hash values zeroed and the crypt block cut out.
  h.hash_prefix.assign(bytes.begin(), bytes.end());
  for (const auto& sh : h.hashes)
    std::fill_n(h.hash_prefix.begin() + static_cast<std::ptrdiff_t>(sh.value_offset), sh.value.size(), std::byte{0});
  if (h.crypt_end > h.crypt_begin)
    h.hash_prefix.erase(h.hash_prefix.begin() + static_cast<std::ptrdiff_t>(h.crypt_begin),
                        h.hash_prefix.begin() + static_cast<std::ptrdiff_t>(h.crypt_end));
  return h;
}

tensor_verifier::tensor_verifier(const tensor_header& header) : header_(&header) {
  crc_.update(header.hash_prefix);
  sha_.update(header.hash_prefix);
}

void tensor_verifier::update(std::span<const std::byte> bytes) noexcept {
  crc_.update(bytes);
  sha_.update(bytes);
}

result<void> tensor_verifier::finish(std::string_view source) {
  return check_tensor_hashes(*header_, crc_.value(), sha_.finish(), source);
}

result<void> check_tensor_hashes(const tensor_header& header, std::optional<std::uint32_t> crc,
                                 const std::optional<sha256_digest>& sha, std::string_view source) {
  const std::string what = std::string(source) + ": tensor '" + header.name + "' (data at offset " +
                           std::to_string(header.data_offset) + ", " + std::to_string(header.data_length) +
                           " bytes)";
  for (const auto& sh : header.hashes) {
    if (sh.kind == hash_kind::crc32) {
      if (!crc) continue;
      std::uint32_t stored = 0;
      for (std::size_t i = 0; i < 4; ++i) stored |= std::uint32_t{sh.value[i]} << (8 * i);
      if (stored != *crc)
        return make_error(errc::hash_mismatch, what + " failed CRC32 verification: expected " +
                                                   std::to_string(stored) + ", got " + std::to_string(*crc));
    } else if (sha && !std::equal(sh.value.begin(), sh.value.end(), sha->begin())) {
      return make_error(errc::hash_mismatch, what + " failed SHA256 verification: expected " + to_hex(sh.value) +
                                                 ", got " + to_hex(*sha));
    }
  }
  return {};
}

bool has_crc32(const tensor_header& header) noexcept {
  return std::any_of(header.hashes.begin(), header.hashes.end(),
                     [](const stored_hash& sh) { return sh.kind == hash_kind::crc32; });
}

result<void> verify_tensor(const tensor_header& header, std::span<const std::byte> plaintext, std::string_view source) {
  tensor_verifier v(header);
  v.update(plaintext);
  return v.finish(source);
}

}  // namespace tz::format

// tensorizer-compatible encryption (format/FORMAT.md §9): keys, Argon2id, nonces and chunked
// XSalsa20-Poly1305, with libsodium kept entirely behind this header.
#pragma once

#include "tz/base/error.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace tz::crypto {

// ---- Constants (format/FORMAT.md §19) -------------------------------------------------------------

inline constexpr std::size_t key_size_bytes = 32;
inline constexpr std::size_t nonce_size_bytes = 24;
inline constexpr std::size_t mac_size_bytes = 16;
inline constexpr std::size_t salt_size_bytes = 16;
// tensorizer always writes 2 MiB chunks; a reader must still honour the size stored in the file.
inline constexpr std::uint64_t chunk_size_bytes = 2097152;

using nonce = std::array<std::uint8_t, nonce_size_bytes>;
using mac = std::array<std::uint8_t, mac_size_bytes>;
using kdf_salt = std::array<std::uint8_t, salt_size_bytes>;

// Argon2id cost presets: the libsodium 1.0.18 values that tensorizer's OpsLimit/MemLimit enums hold.
struct kdf_preset {
  std::uint64_t opslimit;
  std::uint64_t memlimit_bytes;
};
inline constexpr kdf_preset kdf_min{1, 8192};
inline constexpr kdf_preset kdf_interactive{2, 67108864};
inline constexpr kdf_preset kdf_moderate{3, 268435456};  // tensorizer's default
inline constexpr kdf_preset kdf_sensitive{4, 1073741824};

// crypto_pwhash_ALG_ARGON2ID13, the only algorithm tensorizer writes or accepts.
inline constexpr std::int32_t alg_argon2id13 = 2;
// libsodium's accepted ranges on 64-bit hosts.
inline constexpr std::uint64_t opslimit_min = 1;
inline constexpr std::uint64_t opslimit_max = 4294967295ULL;
inline constexpr std::uint64_t memlimit_min_bytes = 8192;
inline constexpr std::uint64_t memlimit_max_bytes = 4398046510080ULL;

// Initializes libsodium once per process; safe to call from any thread, any number of times.
// Every factory below calls it, so callers only need it to learn early that libsodium is unusable.
// Fails (errc::crypto) only when sodium_init() does.
result<void> initialize();

namespace detail {
// Bytes in sodium_malloc'd memory: guard pages around it, mlock'd where the OS allows, zeroed
// and freed on destruction. Move-only; a moved-from buffer is empty.
class guarded_buffer {
 public:
  guarded_buffer() noexcept = default;
  // Allocates size_bytes (> 0) of zeroed guarded memory; errc::crypto when that fails.
  static result<guarded_buffer> allocate(std::size_t size_bytes);
  ~guarded_buffer();
  guarded_buffer(guarded_buffer&& other) noexcept;
  guarded_buffer& operator=(guarded_buffer&& other) noexcept;
  guarded_buffer(const guarded_buffer&) = delete;
  guarded_buffer& operator=(const guarded_buffer&) = delete;

  std::uint8_t* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_bytes_; }
  // Makes the bytes read-only for good: a stray write then faults instead of corrupting a key.
  void seal_read_only() noexcept;

 private:
  std::uint8_t* data_ = nullptr;
  std::size_t size_bytes_ = 0;
};
}  // namespace detail

// ---- Keys ---------------------------------------------------------------------------------

// A 32-byte XSalsa20-Poly1305 key in guarded, read-only memory, zeroed when destroyed.
// Move-only and deliberately not printable; a moved-from key is empty() and must not be used.
// Thread-safe to share by const reference once built (the bytes never change).
class secret_key {
 public:
  // 32 bytes from the OS CSPRNG (randombytes_buf).
  static result<secret_key> random();
  // Copies exactly 32 bytes; any other length is errc::invalid_argument naming the length.
  static result<secret_key> from_bytes(std::span<const std::uint8_t> bytes);
  // Parses exactly 64 hex digits (either case, nothing else); errc::invalid_argument otherwise.
  // The message never echoes the input.
  static result<secret_key> from_hex(std::string_view hex);
  // Reads a raw 32-byte key file; errc::not_found / errc::io / errc::invalid_argument (wrong size,
  // naming the path and the actual size).
  static result<secret_key> load_file(const std::filesystem::path& path);
  // Writes the raw 32 bytes to path with mode 0600: a temp file in the same directory, fsync'd,
  // then renamed over path, so readers see the old file or the whole new one. errc::io on failure
  // (the temp file is removed).
  result<void> save_file(const std::filesystem::path& path) const;

  secret_key(secret_key&&) noexcept = default;
  secret_key& operator=(secret_key&&) noexcept = default;
  secret_key(const secret_key&) = delete;
  secret_key& operator=(const secret_key&) = delete;

  bool empty() const noexcept { return bytes_.data() == nullptr; }
  // The key bytes, valid while this key lives. Precondition: !empty().
  std::span<const std::uint8_t, key_size_bytes> bytes() const noexcept;
  // Constant-time comparison of two non-empty keys.
  bool equals(const secret_key& other) const noexcept;

  // Keys are never printed, logged or stringified.
  friend std::ostream& operator<<(std::ostream&, const secret_key&) = delete;

 private:
  explicit secret_key(detail::guarded_buffer bytes) noexcept : bytes_(std::move(bytes)) {}
  detail::guarded_buffer bytes_;
};

// A passphrase for Argon2id in guarded memory, zeroed when destroyed. Move-only, not printable.
class passphrase {
 public:
  // Copies the bytes of text (tensorizer encodes a str as UTF-8; pass UTF-8). Empty is
  // errc::invalid_argument, as in tensorizer's from_string.
  static result<passphrase> from_string(std::string_view text);
  // Reads a passphrase file and strips ONE trailing newline ("\n" or "\r\n"), so `echo pw > f`
  // works. Empty after stripping, or larger than passphrase_file_max_bytes, is
  // errc::invalid_argument; a missing or unreadable file is errc::not_found / errc::io.
  static result<passphrase> load_file(const std::filesystem::path& path);
  static constexpr std::uint64_t passphrase_file_max_bytes = 1 << 20;

  // A moved-from passphrase is empty (bytes() has size 0).
  passphrase(passphrase&& other) noexcept
      : buffer_(std::move(other.buffer_)), size_bytes_(std::exchange(other.size_bytes_, 0)) {}
  passphrase& operator=(passphrase&& other) noexcept {
    buffer_ = std::move(other.buffer_);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    return *this;
  }
  passphrase(const passphrase&) = delete;
  passphrase& operator=(const passphrase&) = delete;

  // The passphrase bytes, valid while this object lives.
  std::span<const std::uint8_t> bytes() const noexcept { return {buffer_.data(), size_bytes_}; }

  friend std::ostream& operator<<(std::ostream&, const passphrase&) = delete;

 private:
  passphrase(detail::guarded_buffer buffer, std::size_t size_bytes) noexcept
      : buffer_(std::move(buffer)), size_bytes_(size_bytes) {}
  detail::guarded_buffer buffer_;
  std::size_t size_bytes_ = 0;
};

// ---- Key derivation (crypt-info chunk type 1, derivation method 1) ----------------------------

// The stored parameters of a passphrase-derived key. Defaults are tensorizer's (MODERATE).
struct kdf_params {
  std::uint64_t opslimit = kdf_moderate.opslimit;
  std::uint64_t memlimit_bytes = kdf_moderate.memlimit_bytes;
  std::int32_t alg = alg_argon2id13;
  kdf_salt salt{};
};

// A cost ceiling a reader applies to parameters that come from a file: libsodium accepts up to
// 4 TiB and 2^32 passes, which a hostile header could use to exhaust memory or hang the loader.
// The defaults admit every preset with room to spare; raise them for files written with more.
struct kdf_limits {
  std::uint64_t opslimit_max = 64;
  std::uint64_t memlimit_max_bytes = std::uint64_t{8} << 30;
};

// Checks alg == 2 (else errc::unsupported "Unsupported pwhash algorithm (N)"), libsodium's
// ranges and then `limits` (else errc::invalid_argument naming the field, value and bound).
result<void> validate(const kdf_params& params, const kdf_limits& limits = {});

// A fresh random salt (randombytes_buf).
kdf_salt random_salt();

// Argon2id13(passphrase, salt, opslimit, memlimit) -> 32-byte key, i.e. crypto_pwhash exactly as
// tensorizer calls it. Blocks the calling thread for the whole derivation (about a second and
// 256 MiB at MODERATE). Fails with validate()'s errors, or errc::crypto when libsodium cannot
// allocate memlimit bytes.
result<secret_key> derive_key(const passphrase& pass, const kdf_params& params,
                              const kdf_limits& limits = {});

// Caches derived keys so a file whose tensors all share one (params, salt) derives once.
// Entries are keyed by the params, the salt and the passphrase's identity: a BLAKE2b hash of it
// under a random per-cache key, so the cache never stores the passphrase itself. Owned by the
// caller (no process-wide cache); thread-safe. Derivations run one at a time under the cache's
// lock: a second caller for the same entry waits and then shares the result, and at most one
// memlimit-sized Argon2 buffer exists per cache. Entries live as long as the cache.
class key_cache {
 public:
  explicit key_cache(kdf_limits limits = {});
  ~key_cache();
  key_cache(const key_cache&) = delete;
  key_cache& operator=(const key_cache&) = delete;

  // The key for (pass, params), derived now or found in the cache; derive_key()'s errors
  // (failures are not cached). The returned key stays valid while any holder keeps it.
  result<std::shared_ptr<const secret_key>> derive(const passphrase& pass, const kdf_params& params);
  // How many Argon2id derivations this cache has run (lets tests prove "derives once").
  std::uint64_t derivation_count() const;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

// ---- Nonces --------------------------------------------------------------------------------

// A fresh random 24-byte nonce (randombytes_buf), e.g. a tensor's initial nonce.
nonce random_nonce();

// value + n as a 192-bit little-endian unsigned integer, wrapping modulo 2^192: the same as
// applying libsodium's sodium_increment n times, in O(24) steps. Chunk i uses
// increment_nonce(initial_nonce, i).
nonce increment_nonce(const nonce& value, std::uint64_t n) noexcept;

// ---- Chunk layout (crypt-info chunk type 2) ------------------------------------------------

// A byte range [offset_bytes, offset_bytes + size_bytes) within one tensor's data.
struct byte_range {
  std::uint64_t offset_bytes = 0;
  std::uint64_t size_bytes = 0;
};

// Chunks [first, end) of one tensor.
struct chunk_range {
  std::uint64_t first = 0;
  std::uint64_t end = 0;
};

// How a tensor of data_length_bytes is cut into independently sealed chunks: chunk i covers
// bytes [i * chunk_size, min((i + 1) * chunk_size, data_length)). A zero-length tensor has none.
struct chunk_layout {
  std::uint64_t data_length_bytes = 0;
  std::uint64_t chunk_size_bytes = crypto::chunk_size_bytes;

  // ceil(data_length / chunk_size); 0 for an empty tensor. Precondition: chunk_size > 0.
  std::uint64_t count() const noexcept;
  // The bytes of chunk `index`. Precondition: index < count().
  byte_range range(std::uint64_t index) const noexcept;
  // The bytes of chunks [chunks.first, chunks.end). Precondition: first <= end <= count().
  byte_range range(chunk_range chunks) const noexcept;
};

// Checks what tensorizer's reader checks of a type-2 chunk (format/FORMAT.md §9.4): chunk_size a
// multiple of 64 and >= 1024, and mac_count == ceil(data_length / chunk_size).
// errc::format naming the expected and actual values.
result<void> validate(const chunk_layout& layout, std::uint64_t mac_count);

// ---- Sealing and opening ---------------------------------------------------------------------

// Encrypts bytes in place with XSalsa20-Poly1305 (crypto_secretbox_detached) and returns the
// detached MAC; the ciphertext is exactly as long as the plaintext. Any length works, including
// a whole tensor (crypt-info type 3) or 0 bytes. Precondition: !key.empty().
mac seal_chunk(std::span<std::byte> bytes, const nonce& chunk_nonce, const secret_key& key) noexcept;

// Verifies tag against the ciphertext in bytes and, only if it matches, decrypts in place
// (crypto_secretbox_open_detached). Returns false on a MAC mismatch; bytes are then unchanged.
[[nodiscard]] bool open_chunk(std::span<std::byte> bytes, const nonce& chunk_nonce,
                              const secret_key& key, const mac& tag) noexcept;

// Seals chunks [chunks.first, chunks.end) of a tensor in place. `bytes` holds exactly those
// chunks (layout.range(chunks)), not the whole tensor, so a worker can seal one slice; their
// MACs are written to macs[chunks.first .. chunks.end), macs covering the whole tensor.
// errc::invalid_argument when bytes or macs do not match layout and chunks (nothing is sealed).
result<void> seal_chunks(std::span<std::byte> bytes, const chunk_layout& layout, chunk_range chunks,
                         const secret_key& key, const nonce& initial_nonce, std::span<mac> macs);

// Opens chunks [chunks.first, chunks.end) of a tensor in place, chunk i with nonce
// initial_nonce + i and macs[i]; `bytes` holds exactly those chunks, macs the whole tensor's.
// Several threads may open disjoint ranges of one tensor at once, e.g. as reads complete.
// Fails with validate(layout, macs.size())'s error or errc::invalid_argument for a mismatched
// span (nothing opened), or errc::crypto at the first chunk whose MAC does not match: the message
// names the chunk and its byte range, *first_bad_chunk (if given) receives its index, chunks
// before it are decrypted and it and later ones are left as ciphertext.
result<void> open_chunks(std::span<std::byte> bytes, const chunk_layout& layout, chunk_range chunks,
                         const secret_key& key, const nonce& initial_nonce,
                         std::span<const mac> macs, std::uint64_t* first_bad_chunk = nullptr);

// What open_chunks says of chunk `index` when its MAC does not match (the chunk, its byte range).
std::string mac_mismatch_message(const chunk_layout& layout, std::uint64_t index);

// Seals a whole tensor in place the way tensorizer's writer does: 2 MiB chunks (or
// chunk_size_bytes), nonces initial_nonce + i; returns one MAC per chunk (none for 0 bytes).
// Precondition: chunk_size_bytes > 0 and !key.empty().
std::vector<mac> seal_tensor(std::span<std::byte> data, const secret_key& key, const nonce& initial_nonce,
                             std::uint64_t chunk_size_bytes = crypto::chunk_size_bytes);

// Opens a whole tensor in place: open_chunks() over every chunk.
//
// tensorizer's special case "type 2 with num_macs == 1 is ONE secretbox over the whole data"
// needs no branch here: validate() demands num_macs == ceil(data_length / chunk_size), so
// num_macs == 1 means 0 < data_length <= chunk_size, and then chunk 0 *is* the whole data with
// nonce initial_nonce + 0. (The crypto tests check this equivalence.) A type-3 (sequential) block
// is one secretbox over the whole data: use open_chunk() on the whole span.
result<void> open_tensor(std::span<std::byte> data, const secret_key& key, const nonce& initial_nonce,
                         std::span<const mac> macs, std::uint64_t* first_bad_chunk = nullptr,
                         std::uint64_t chunk_size_bytes = crypto::chunk_size_bytes);

}  // namespace tz::crypto

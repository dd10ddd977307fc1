// libsodium initialization, guarded memory, and the secret_key / passphrase types of tz/sodium.hpp.
#include "tz/crypto/sodium.hpp"
#include "tz/base/posix_io.hpp"

#include <sodium.h>

#include <cassert>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tz::crypto {

result<void> initialize() {
  // A function-local static runs sodium_init() once even under concurrent first calls, and an int
  // has no destructor, so nothing happens at exit. sodium_init() returns 1 if already initialized.
  static const int status = sodium_init();
  if (status < 0) return make_error(errc::crypto, "libsodium: sodium_init() failed");
  return {};
}

namespace detail {

result<guarded_buffer> guarded_buffer::allocate(std::size_t size_bytes) {
  assert(size_bytes > 0);
  TZ_CHECK(initialize());
  void* memory = sodium_malloc(size_bytes);
  if (memory == nullptr) {
    return make_error(errc::crypto, "libsodium: sodium_malloc(" + std::to_string(size_bytes) +
                                        ") failed: " + std::strerror(errno));
  }
  // sodium_malloc fills with 0xdb to expose use of uninitialized bytes; callers expect zeros.
  sodium_memzero(memory, size_bytes);
  guarded_buffer buffer;
  buffer.data_ = static_cast<std::uint8_t*>(memory);
  buffer.size_bytes_ = size_bytes;
  return buffer;
}

guarded_buffer::~guarded_buffer() {
  // sodium_free makes the region writable again, zeroes it, unlocks and unmaps it.
  if (data_ != nullptr) sodium_free(data_);
}

guarded_buffer::guarded_buffer(guarded_buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_bytes_(std::exchange(other.size_bytes_, 0)) {}

guarded_buffer& guarded_buffer::operator=(guarded_buffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) sodium_free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

void guarded_buffer::seal_read_only() noexcept {
  // Failure only means the OS refused mprotect; the bytes stay correct, just writable.
  if (data_ != nullptr) (void)sodium_mprotect_readonly(data_);
}

}  // namespace detail

namespace {

error file_error(const std::filesystem::path& path, const char* what, int err) {
  return os_error(err, std::string(what) + " '" + path.string() + "'");
}

// Reads exactly `size` bytes at the file's start into out (end of file first: it shrank meanwhile).
result<void> read_exact(int fd, const std::filesystem::path& path, std::uint8_t* out, std::size_t size) {
  return pread_full(fd, std::as_writable_bytes(std::span(out, size)), 0, "file '" + path.string() + "'");
}

result<void> write_exact(int fd, const std::filesystem::path& path, const std::uint8_t* in, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, in + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return file_error(path, "cannot write", errno);
    done += static_cast<std::size_t>(n);
  }
  return {};
}

// Opens path read-only and returns its descriptor and size, refusing anything above max_bytes
// before a single byte is allocated.
struct opened_file {
  unique_fd fd;
  std::uint64_t size_bytes = 0;
};
result<opened_file> open_for_read(const std::filesystem::path& path) {
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return file_error(path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return file_error(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode)) return make_error(errc::invalid_argument, "'" + path.string() + "' is not a regular file");
  return opened_file{std::move(fd), static_cast<std::uint64_t>(st.st_size)};
}

// Writes bytes to a mode-0600 temp file beside path, fsyncs it and renames it over path.
result<void> write_file_atomically(const std::filesystem::path& path, const std::uint8_t* bytes,
                                   std::size_t size) {
  std::string temp = path.string() + ".tmp.XXXXXX";
  // mkstemp creates the file with mode 0600 (before umask), so no other user can ever see it.
  const unique_fd owned(::mkostemp(temp.data(), O_CLOEXEC));
  if (!owned) return file_error(temp, "cannot create temporary file", errno);
  const int fd = owned.get();
  auto fail = [&](const char* what, int err) {
    ::unlink(temp.c_str());
    return file_error(temp, what, err);
  };
  if (::fchmod(fd, S_IRUSR | S_IWUSR) != 0) return fail("cannot chmod 0600", errno);
  if (auto written = write_exact(fd, temp, bytes, size); !written) {
    ::unlink(temp.c_str());
    return written.error();
  }
  if (::fsync(fd) != 0) return fail("cannot fsync", errno);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return file_error(path, "cannot rename temporary file onto", err);
  }
  return {};
}

}  // namespace

// ---- secret_key ---------------------------------------------------------------------------

result<secret_key> secret_key::random() {
  TZ_TRY(buffer, detail::guarded_buffer::allocate(key_size_bytes));
  randombytes_buf(buffer.data(), key_size_bytes);
  buffer.seal_read_only();
  return secret_key(std::move(buffer));
}

result<secret_key> secret_key::from_bytes(std::span<const std::uint8_t> bytes) {
  if (bytes.size() != key_size_bytes) {
    return make_error(errc::invalid_argument, "encryption key must be exactly 32 bytes, got " +
                                                  std::to_string(bytes.size()));
  }
  TZ_TRY(buffer, detail::guarded_buffer::allocate(key_size_bytes));
  std::memcpy(buffer.data(), bytes.data(), key_size_bytes);
  buffer.seal_read_only();
  return secret_key(std::move(buffer));
}

result<secret_key> secret_key::from_hex(std::string_view hex) {
  if (hex.size() != 2 * key_size_bytes) {
    return make_error(errc::invalid_argument, "hex encryption key must be exactly 64 hex digits, got " +
                                                  std::to_string(hex.size()) + " characters");
  }
  TZ_TRY(buffer, detail::guarded_buffer::allocate(key_size_bytes));
  std::size_t decoded = 0;
  const char* end = nullptr;
  // sodium_hex2bin runs in time independent of the digits, so a key's value does not leak.
  const int rc = sodium_hex2bin(buffer.data(), key_size_bytes, hex.data(), hex.size(), nullptr, &decoded, &end);
  if (rc != 0 || decoded != key_size_bytes || end != hex.data() + hex.size()) {
    return make_error(errc::invalid_argument, "hex encryption key contains a character that is not a hex digit");
  }
  buffer.seal_read_only();
  return secret_key(std::move(buffer));
}

result<secret_key> secret_key::load_file(const std::filesystem::path& path) {
  TZ_TRY(file, open_for_read(path));
  if (file.size_bytes != key_size_bytes) {
    return make_error(errc::invalid_argument, "key file '" + path.string() + "' must hold exactly 32 bytes, has " +
                                                  std::to_string(file.size_bytes));
  }
  TZ_TRY(buffer, detail::guarded_buffer::allocate(key_size_bytes));
  TZ_CHECK(read_exact(file.fd.get(), path, buffer.data(), key_size_bytes));
  buffer.seal_read_only();
  return secret_key(std::move(buffer));
}

result<void> secret_key::save_file(const std::filesystem::path& path) const {
  assert(!empty());
  return write_file_atomically(path, bytes_.data(), key_size_bytes);
}

std::span<const std::uint8_t, key_size_bytes> secret_key::bytes() const noexcept {
  assert(!empty());
  return std::span<const std::uint8_t, key_size_bytes>(bytes_.data(), key_size_bytes);
}

bool secret_key::equals(const secret_key& other) const noexcept {
  assert(!empty() && !other.empty());
  return sodium_memcmp(bytes_.data(), other.bytes_.data(), key_size_bytes) == 0;
}

// ---- passphrase ---------------------------------------------------------------------------

result<passphrase> passphrase::from_string(std::string_view text) {
  if (text.empty()) return make_error(errc::invalid_argument, "passphrase must not be empty");
  TZ_TRY(buffer, detail::guarded_buffer::allocate(text.size()));
  std::memcpy(buffer.data(), text.data(), text.size());
  buffer.seal_read_only();
  return passphrase(std::move(buffer), text.size());
}

result<passphrase> passphrase::load_file(const std::filesystem::path& path) {
  TZ_TRY(file, open_for_read(path));
  if (file.size_bytes > passphrase_file_max_bytes) {
    return make_error(errc::invalid_argument, "passphrase file '" + path.string() + "' has " +
                                                  std::to_string(file.size_bytes) + " bytes, more than the " +
                                                  std::to_string(passphrase_file_max_bytes) + " allowed");
  }
  if (file.size_bytes == 0) {
    return make_error(errc::invalid_argument, "passphrase file '" + path.string() + "' is empty");
  }
  const auto size = static_cast<std::size_t>(file.size_bytes);
  TZ_TRY(buffer, detail::guarded_buffer::allocate(size));
  TZ_CHECK(read_exact(file.fd.get(), path, buffer.data(), size));
  // Strip exactly one line ending: "pw\n" and "pw\r\n" both mean "pw", "pw\n\n" means "pw\n".
  std::size_t length = size;
  if (length > 0 && buffer.data()[length - 1] == '\n') {
    --length;
    if (length > 0 && buffer.data()[length - 1] == '\r') --length;
  }
  if (length == 0) {
    return make_error(errc::invalid_argument, "passphrase file '" + path.string() + "' holds only a newline");
  }
  buffer.seal_read_only();
  return passphrase(std::move(buffer), length);
}

}  // namespace tz::crypto

// The .tensors writer: the layout, hashes and version rules of tensorizer 2.11.1 (format/FORMAT.md §10),
// and those of 2.12 for dimensions >= 2^32 (data version 5, §16.1).
#include "tz/format/writer.hpp"
#include "tz/base/posix_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <random>
#include <set>

namespace tz::format {
namespace {

void put(std::vector<std::byte>& out, std::uint64_t v, std::size_t width) {
  for (std::size_t i = 0; i < width; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

void put_bytes(std::vector<std::byte>& out, std::string_view s) {
  for (char c : s) out.push_back(static_cast<std::byte>(c));
}

void patch(std::vector<std::byte>& out, std::size_t at, std::uint64_t v, std::size_t width) {
  for (std::size_t i = 0; i < width; ++i) out[at + i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}

// The per-tensor header with zeroed hash slots; records where the slots and the crypt block sit.
struct built_header {
  std::vector<std::byte> bytes;
  std::size_t crc_at = 0, sha_at = 0;  // 0: absent
  std::size_t crypt_begin = 0, crypt_end = 0;
};

// A long tensor (some dimension >= 2^32) stores every one of its dimensions as u64.
bool has_long_dimension(const std::vector<std::uint64_t>& shape) {
  return std::any_of(shape.begin(), shape.end(), [](std::uint64_t d) { return d >= long_dimension_min; });
}

built_header build_header(const tensor_write& t, const std::string& name, std::uint64_t data_length,
                          bool encrypted_file, std::span<const std::byte> crypt_body) {
  built_header h;
  auto& b = h.bytes;
  put(b, 0, 8);  // header_size, patched below
  put(b, t.module_index, 2);
  put(b, static_cast<std::uint8_t>(t.type), 1);
  put(b, name.size(), 2);
  put_bytes(b, name);
  put(b, t.dtype.stored.size(), 1);
  put_bytes(b, t.dtype.stored);
  put(b, t.shape.size(), 1);
  const std::size_t dim_bytes = has_long_dimension(t.shape) ? 8 : 4;
  for (auto d : t.shape) put(b, d, dim_bytes);
  const bool sha_only = encrypted_file && data_length > 0;
  put(b, sha_only ? 35 : 41, 2);
  put(b, sha_only ? 1 : 2, 1);
  if (!sha_only) {
    put(b, 0, 1), put(b, 4, 1);
    h.crc_at = b.size();
    put(b, 0, 4);
  }
  put(b, 1, 1), put(b, 32, 1);
  h.sha_at = b.size();
  b.resize(b.size() + 32);
  if (encrypted_file) {
    h.crypt_begin = b.size();
    put(b, crypt_body.size(), 8);
    b.insert(b.end(), crypt_body.begin(), crypt_body.end());
    h.crypt_end = b.size();
  }
  put(b, data_length, 8);
  patch(b, 0, b.size(), 8);
  return h;
}

}  // namespace

std::vector<std::byte> encode_file_header(const file_header& header) {
  std::vector<std::byte> head;
  put_bytes(head, "|TZR|");
  put(head, header.version, 4);
  put(head, header.flags, 1);
  head.resize(head.size() + 31);
  put(head, header.tensor_size, 8);
  put(head, 0, 8);  // reserved
  put(head, header.tensor_count, 8);
  put(head, header.metadata_bytes, 8);
  return head;
}

void append_index_entry(std::vector<std::byte>& out, const tensor_entry& entry, bool tagged) {
  if (tagged) put(out, entry.metadata_version, 4);
  put(out, entry.name.size(), 2);
  put_bytes(out, entry.name);
  put(out, static_cast<std::uint8_t>(entry.type), 1);
  put(out, entry.dtype.stored.size(), 1);
  put_bytes(out, entry.dtype.stored);
  put(out, entry.shape.size(), 1);
  for (auto d : entry.shape) put(out, d, entry.metadata_version == 5 ? 8 : 4);
  put(out, entry.header_offset, 8);
  put(out, entry.data_offset, 8);
  put(out, entry.data_length, 8);
}

// The atomic mode's sink: a temporary file next to the final path, removed unless published.
class temp_file_sink final : public write_sink {
 public:
  static result<std::unique_ptr<temp_file_sink>> create(const std::string& path) {
    auto f = std::make_unique<temp_file_sink>();
    std::random_device rd;
    f->temp_path_ = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
    f->fd_.reset(::open(f->temp_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!f->fd_)
      return make_error(errc::io, "file " + path + ": cannot create a temporary file next to it: " + std::strerror(errno));
    return f;
  }
  ~temp_file_sink() override {
    fd_.reset();
    if (!published_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
  }
  result<void> write_at(std::uint64_t offset, std::span<const std::byte> bytes) override {
    return pwrite_full(fd_.get(), bytes, offset, "file " + temp_path_);
  }
  // Cuts the file to `size` bytes, makes it durable and renames it over `path`.
  result<void> publish(const std::string& path, std::uint64_t size) {
    const auto fail = [&](const char* what) {
      return make_error(errc::io, "file " + path + ": " + what + ": " + std::strerror(errno));
    };
    if (::ftruncate(fd_.get(), static_cast<off_t>(size)) != 0 || ::fsync(fd_.get()) != 0)
      return fail("cannot finish the temporary file");
    fd_.reset();
    if (::rename(temp_path_.c_str(), path.c_str()) != 0) return fail("cannot rename the temporary file into place");
    published_ = true;
    return {};
  }

 private:
  std::string temp_path_;
  unique_fd fd_;
  bool published_ = false;
};

struct tensor_writer::state {
  std::string path;                  // the final path, or the stream's name
  std::unique_ptr<write_sink> sink;  // where the bytes go
  temp_file_sink* file = nullptr;    // the atomic mode's sink (also `sink`); null for a stream
  writer_options options;
  std::uint32_t version = 1;
  std::uint64_t tensor_size = 0, tensor_count = 0;
  std::uint64_t end_offset = file_prefix_bytes + python_metadata_bytes;
  std::vector<tensor_entry> entries;  // what the index holds, to re-encode it when tags appear
  std::vector<std::byte> metadata;    // the encoded index
  bool tagged = false;                // flag bit 1: every entry carries its u32 tag
  std::set<std::string> names;
  bool closed = false;

  error fail(const std::string& why) const { return make_error(errc::io, "file " + path + ": " + why); }
  result<void> write_at(std::uint64_t offset, std::span<const std::byte> bytes) const {
    return sink->write_at(offset, bytes);
  }
  result<void> begin();
  result<void> write_prologue_and_end() const;
  result<std::uint64_t> checked_data_length(const tensor_write& t, const std::string& name,
                                            const std::string& who) const;
  result<void> add_entry(tensor_entry entry, const std::string& who);
  result<void> write_tensor(const tensor_write& t);
};

tensor_writer::tensor_writer(std::unique_ptr<state> s) : state_(std::move(s)) {}
tensor_writer::tensor_writer(tensor_writer&&) noexcept = default;
tensor_writer& tensor_writer::operator=(tensor_writer&&) noexcept = default;
tensor_writer::~tensor_writer() = default;
std::uint32_t tensor_writer::version() const noexcept { return state_->version; }
std::uint64_t tensor_writer::size() const noexcept { return state_->end_offset + 8; }

// The empty index; a stream also gets its header and end marker, so it is a complete file from the start.
result<void> tensor_writer::state::begin() {
  std::vector<std::byte> zeros(python_metadata_bytes);
  TZ_CHECK(write_at(file_prefix_bytes, zeros));
  if (!file) TZ_CHECK(write_prologue_and_end());
  return {};
}

// The file header as the tensors written so far make it, and the end marker after the last one:
// with them the bytes written are a complete file (tensorizer's _sync_prologue_state).
result<void> tensor_writer::state::write_prologue_and_end() const {
  file_header fh;
  fh.version = version;
  // tensorizer stores flags only from version 4 on; bit 1 only comes with version 5.
  fh.flags = (version >= 4 && options.encryptor) ? flag_encrypted : 0;
  if (tagged) fh.flags |= flag_versioned_headers;
  fh.tensor_size = tensor_size;
  fh.tensor_count = tensor_count;
  fh.metadata_bytes = python_metadata_bytes;
  const std::vector<std::byte> end_marker(8);
  TZ_CHECK(write_at(end_offset, end_marker));
  return write_at(0, encode_file_header(fh));
}

result<tensor_writer> tensor_writer::create(const std::string& path, writer_options options) {
  auto s = std::make_unique<state>();
  s->path = path;
  s->options = options;
  s->version = options.encryptor ? 3 : 1;
  TZ_TRY(file, temp_file_sink::create(path));
  s->file = file.get();
  s->sink = std::move(file);
  TZ_CHECK(s->begin());
  return tensor_writer(std::move(s));
}

result<tensor_writer> tensor_writer::create(std::unique_ptr<write_sink> sink, std::string name, writer_options options) {
  auto s = std::make_unique<state>();
  s->path = std::move(name);
  s->options = options;
  s->version = options.encryptor ? 3 : 1;
  s->sink = std::move(sink);
  TZ_CHECK(s->begin());
  return tensor_writer(std::move(s));
}

result<void> tensor_writer::write(const tensor_write& t) {
  if (state_->closed) return make_error(errc::invalid_argument, "file " + state_->path + ": writer already closed");
  return state_->write_tensor(t);
}

// The tensor's stored data length, after the checks on what the format can hold. The element
// count follows the reader's rule (format/tensorizer_index.cpp), so whatever is written reads back.
result<std::uint64_t> tensor_writer::state::checked_data_length(const tensor_write& t, const std::string& name,
                                                                const std::string& who) const {
  if (t.path.parts.empty() || name.empty()) return fail(who + ": empty tensor path");
  if (t.shape.size() > 255 || t.dtype.stored.size() > 255 || name.size() > 65535)
    return fail(who + ": name, dtype or rank too large for the format");
  std::uint64_t count = 1;
  for (auto d : t.shape) {
    if (d != 0 && count > UINT64_MAX / d) return fail(who + ": element count overflows 64 bits");
    count *= d;
  }
  if (count > UINT64_MAX / t.dtype.itemsize) return fail(who + ": byte size overflows 64 bits");
  const std::uint64_t data_length = t.meta ? 0 : count * t.dtype.itemsize;
  if (t.data.size() != data_length)
    return make_error(errc::invalid_argument, "file " + path + ": " + who + " needs " + std::to_string(data_length) +
                                                  " data bytes, got " + std::to_string(t.data.size()));
  return data_length;
}

// Adds the entry to the index and writes what changed. The first long entry tags every entry,
// the earlier ones with 1, and the whole index is rewritten, as tensorizer 2.12 does.
result<void> tensor_writer::state::add_entry(tensor_entry entry, const std::string& who) {
  const bool retag = entry.metadata_version == 5 && !tagged;
  std::vector<std::byte> encoded;
  if (retag)
    for (const auto& e : entries) append_index_entry(encoded, e, true);
  append_index_entry(encoded, entry, tagged || retag);
  const std::size_t at = retag ? 0 : metadata.size();
  if (at + encoded.size() > python_metadata_bytes)
    // A limit of the format (format/FORMAT.md §15), not an I/O failure.
    return make_error(errc::unsupported, "file " + path + ": " + who + ": metadata overflow (the 256 KiB index is full)");
  TZ_CHECK(write_at(file_prefix_bytes + at, encoded));
  metadata.resize(at);
  metadata.insert(metadata.end(), encoded.begin(), encoded.end());
  tagged = tagged || retag;
  entries.push_back(std::move(entry));
  return {};
}

result<void> tensor_writer::state::write_tensor(const tensor_write& t) {
  const std::string name = encode_name(t.path);
  const std::string who = "tensor '" + display_name(t.path) + "'";
  TZ_TRY(data_length, checked_data_length(t, name, who));
  if (names.count(name)) return fail(who + ": conflicting tensor paths (written twice)");
  // Encrypt a copy of the data first: the crypt block's size is part of the header.
  std::vector<std::byte> cipher;
  std::vector<std::byte> crypt_body{std::byte{0}, std::byte{0}};  // chunk_count 0
  if (options.encryptor && data_length > 0) {
    cipher.assign(t.data.begin(), t.data.end());
    TZ_TRY(body, options.encryptor->encrypt(cipher));
    crypt_body = std::move(body);
  }
  auto h = build_header(t, name, data_length, options.encryptor != nullptr, crypt_body);
  tensor_entry entry;
  entry.name = name;
  entry.type = t.type;
  entry.dtype = t.dtype;
  entry.shape = t.shape;
  entry.metadata_version = has_long_dimension(t.shape) ? 5 : 1;
  entry.header_offset = end_offset;
  entry.data_offset = end_offset + h.bytes.size();
  entry.data_length = data_length;
  // Hashes cover H || plaintext, H = header with zeroed hash values and without the crypt block.
  std::vector<std::byte> prefix(h.bytes.begin(), h.bytes.begin() + static_cast<std::ptrdiff_t>(h.crypt_begin ? h.crypt_begin : h.bytes.size()));
  if (h.crypt_end) prefix.insert(prefix.end(), h.bytes.begin() + static_cast<std::ptrdiff_t>(h.crypt_end), h.bytes.end());
  crc32_hasher crc;
  sha256_hasher sha;
  crc.update(prefix), crc.update(t.data);
  sha.update(prefix), sha.update(t.data);
  if (h.crc_at) patch(h.bytes, h.crc_at, crc.value(), 4);
  const auto digest = sha.finish();
  std::memcpy(h.bytes.data() + h.sha_at, digest.data(), digest.size());
  const std::uint64_t header_offset = entry.header_offset, data_offset = entry.data_offset;
  TZ_CHECK(add_entry(std::move(entry), who));
  // The versions only rise once the tensor is in the index (format/FORMAT.md §3.1).
  if (t.dtype.opaque) version = std::max(version, 2u);
  if (t.meta) version = std::max(version, 4u);
  if (tagged) version = std::max(version, 5u);
  names.insert(name);
  TZ_CHECK(write_at(header_offset, h.bytes));
  TZ_CHECK(write_at(data_offset, cipher.empty() ? t.data : std::span<const std::byte>(cipher)));
  end_offset = data_offset + data_length;
  tensor_size += data_length;
  ++tensor_count;
  if (!file) TZ_CHECK(write_prologue_and_end());
  return {};
}

result<void> tensor_writer::close() {
  auto& s = *state_;
  if (s.closed) return {};
  TZ_CHECK(s.write_prologue_and_end());
  if (s.file) TZ_CHECK(s.file->publish(s.path, s.end_offset + 8));
  s.closed = true;
  return {};
}

}  // namespace tz::format

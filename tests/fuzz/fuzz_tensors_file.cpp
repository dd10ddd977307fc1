// libFuzzer harness: a whole .tensors file through the reader's parsers in the engine's order: the
// 73-byte prefix, the metadata index, every tensor header (crypt-info included), the stored hashes,
// decryption with a fixed key. Round trips: prefix and index entries re-encode to the input bytes.
#include "tensors_checks.hpp"

using namespace tz;
using namespace tz::format;

namespace {

void check_index(const file_index& index, std::span<const std::byte> file) {
  const auto& fh = index.header;
  fuzz::require(index.tensors.size() == fh.tensor_count, "one entry per counted tensor");
  std::uint64_t previous_end = file_prefix_bytes + fh.metadata_bytes;
  std::vector<std::byte> encoded;
  for (const auto& e : index.tensors) {
    fuzz::require(e.header_offset >= previous_end && e.data_offset > e.header_offset, "entries in file order");
    fuzz::require(e.data_offset <= file.size() && e.data_length <= file.size() - e.data_offset, "data inside the file");
    fuzz::require(e.data_length == 0 || e.data_length == e.deserialized_bytes, "data length matches dtype x shape");
    previous_end = e.end_offset();
    append_index_entry(encoded, e, fh.has_tagged_metadata());
  }
  const auto metadata = file.subspan(file_prefix_bytes, fh.metadata_bytes);
  fuzz::require(encoded.size() <= metadata.size(), "entries fit in the metadata block");
  fuzz::require(std::equal(encoded.begin(), encoded.end(), metadata.begin()), "index entries re-encode to their bytes");
}

void check_tensor(const file_index& index, const tensor_entry& e, std::span<const std::byte> file) {
  const auto bytes = file.subspan(e.header_offset, e.data_offset - e.header_offset);
  auto h = parse_tensor_header(bytes, index.header, e, "fuzz");
  if (!h) {
    fuzz::require(h.error().code == errc::format || h.error().code == errc::crypto, "header errors are format/crypto");
    return;
  }
  fuzz::check_tensor_header(*h, bytes, index.header, e);
  const auto data = file.subspan(e.data_offset, e.data_length);
  if (!h->crypt) {
    auto v = verify_tensor(*h, data, "fuzz");
    fuzz::require(v.has_value() || v.error().code == errc::hash_mismatch, "verification fails only as a mismatch");
  }
  fuzz::try_decrypt(*h, data);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = fuzz::bytes_of(data, size);
  auto fh = parse_file_header(file.first(std::min<std::size_t>(size, file_prefix_bytes)), size, "fuzz");
  if (!fh) {
    fuzz::require(fh.error().code == errc::format, "prefix errors are errc::format");
    return 0;
  }
  fuzz::require(size >= file_prefix_bytes + fh->metadata_bytes, "metadata inside the file");
  fuzz::check_file_header_round_trip(*fh, file);
  auto index = parse_index(*fh, file.subspan(file_prefix_bytes, fh->metadata_bytes), size, "fuzz");
  if (!index) {
    fuzz::require(index.error().code == errc::format, "index errors are errc::format");
    return 0;
  }
  check_index(*index, file);
  for (const auto& e : index->tensors) check_tensor(*index, e, file);
  return 0;
}

// libFuzzer harness: the 73-byte .tensors prefix against any claimed file size (the first 8 input
// bytes), as a byte source that knows the size before reading reports it. A parse promises that the
// metadata block lies inside the file and that the prefix re-encodes to its bytes.
#include "tensors_checks.hpp"

using namespace tz;
using namespace tz::format;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 8) return 0;
  const auto input = fuzz::bytes_of(data, size);
  const std::uint64_t file_bytes = fuzz::le(input, 0, 8);
  const auto prefix = input.subspan(8);
  auto fh = parse_file_header(prefix, file_bytes, "fuzz");
  if (!fh) {
    fuzz::require(fh.error().code == errc::format, "prefix errors are errc::format");
    return 0;
  }
  fuzz::require(prefix.size() >= file_prefix_bytes, "a parsed prefix has 73 bytes");
  fuzz::require(file_bytes >= file_prefix_bytes && fh->metadata_bytes <= file_bytes - file_prefix_bytes,
                "metadata inside the claimed file");
  fuzz::require(fh->metadata_bytes <= max_metadata_bytes, "metadata under the cap");
  fuzz::require(fh->tensor_count >= 1 && fh->tensor_count <= fh->metadata_bytes / 29, "tensor count fits the metadata");
  fuzz::require(fh->version >= 1 && fh->version <= max_data_version && (fh->flags & ~known_flags) == 0 &&
                    (fh->version >= 5 || !fh->has_tagged_metadata()),
                "known version and flags (bit 1 only in version 5)");
  fuzz::check_file_header_round_trip(*fh, prefix);
  return 0;
}

// libFuzzer harness: a whole safetensors file through st_header_length and parse_safetensors_header.
// A parse promises that the tensors tile the data buffer in offset order, each as long as dtype x
// shape. Round trip: the format has no single byte form (key order, whitespace, escapes are free),
// so the writer's plan of the parsed tensors and metadata must parse back to the same tensors
// (name, dtype, shape, size) and metadata.
#include "fuzz_support.hpp"
#include "tz/format/safetensors.hpp"

#include <algorithm>
#include <map>
#include <tuple>

using namespace tz;
using namespace tz::format;

namespace {

using summary = std::map<std::string, std::tuple<std::string, std::vector<std::uint64_t>, std::uint64_t>>;

summary summarise(const st_index& index) {
  summary s;
  for (const auto& t : index.tensors) s[t.name] = {t.dtype, t.shape, t.size_bytes()};
  return s;
}

void check_index(const st_index& index, std::uint64_t file_bytes) {
  std::uint64_t at = index.data_offset_bytes();
  for (const auto& t : index.tensors) {
    fuzz::require(t.data_begin == at && t.data_end >= t.data_begin, "tensors tile the buffer in order");
    auto bytes = st_tensor_bytes(t.dtype, t.shape);
    fuzz::require(bytes.has_value() && *bytes == t.size_bytes(), "size is dtype x shape");
    at = t.data_end;
  }
  fuzz::require(at == file_bytes, "the tensors end at the end of the file");
}

void check_round_trip(const st_index& index, std::span<const std::byte> file) {
  std::vector<st_write_tensor> tensors;
  for (const auto& t : index.tensors)
    tensors.push_back({t.name, t.dtype, t.shape, file.subspan(t.data_begin, t.size_bytes())});
  auto layout = plan_safetensors(tensors, index.metadata);
  fuzz::require(layout.has_value(), "the writer accepts what the reader accepted");
  const auto header = fuzz::bytes_of(reinterpret_cast<const std::uint8_t*>(layout->header.data()), layout->header.size());
  auto n = st_header_length(header.first<8>(), layout->file_bytes, "fuzz re-encoded");
  fuzz::require(n.has_value() && 8 + *n == header.size(), "planned header length");
  auto again = parse_safetensors_header(header.subspan(8), layout->file_bytes, "fuzz re-encoded");
  fuzz::require(again.has_value(), "the planned header parses");
  fuzz::require(summarise(*again) == summarise(index), "the planned header has the same tensors");
  auto sorted = [](st_metadata m) { std::sort(m.begin(), m.end()); return m; };
  fuzz::require(sorted(again->metadata) == sorted(index.metadata), "the planned header has the same metadata");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 8) return 0;
  const auto file = fuzz::bytes_of(data, size);
  auto n = st_header_length(file.first<8>(), size, "fuzz");
  if (!n) {
    fuzz::require(n.error().code == errc::format, "length errors are errc::format");
    return 0;
  }
  fuzz::require(*n >= 1 && *n <= size - 8, "header inside the file");
  auto index = parse_safetensors_header(file.subspan(8, *n), size, "fuzz");
  if (!index) {
    fuzz::require(index.error().code == errc::format, "header errors are errc::format");
    return 0;
  }
  fuzz::require(index->header_bytes == *n, "header_bytes is the declared length");
  check_index(*index, size);
  check_round_trip(*index, file);
  return 0;
}

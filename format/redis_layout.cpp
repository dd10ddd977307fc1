// The FORMAT.md §13 Redis key layout of a .tensors file, as byte ranges of the file.
#include "tz/format/redis_layout.hpp"

namespace tz::format {

std::vector<redis_range> redis_layout(const file_index& index, std::span<const std::byte> file) {
  // Without tensors the virtual file is everything but the 8-byte end marker.
  const std::uint64_t header_end = index.tensors.empty() ? (file.size() >= 8 ? file.size() - 8 : file.size())
                                                         : index.tensors.front().header_offset;
  std::vector<redis_range> ranges{{"header", 0, file.first(header_end)}};
  for (const auto& e : index.tensors) {
    ranges.push_back({e.name, e.header_offset, file.subspan(e.header_offset, e.header_bytes())});
    ranges.push_back({e.name, e.data_offset, file.subspan(e.data_offset, e.data_length)});
  }
  return ranges;
}

}  // namespace tz::format

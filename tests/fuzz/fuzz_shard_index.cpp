// libFuzzer harness: model.safetensors.index.json through parse_shard_index. A parse promises
// plain, sorted, distinct shard names and in-range positions; the writer's JSON of what was parsed
// must parse back to the same shards, tensor -> shard map and total size.
#include "fuzz_support.hpp"
#include "tz/format/shard_index.hpp"

#include <algorithm>
#include <map>

using namespace tz;
using namespace tz::format;

namespace {

std::map<std::string, std::string> by_name(const shard_index& index) {
  std::map<std::string, std::string> out;
  for (const auto& [tensor, at] : index.weight_map) out[tensor] = index.shards[at];
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto index = parse_shard_index(fuzz::bytes_of(data, size), "fuzz");
  if (!index) {
    fuzz::require(index.error().code == errc::format, "index errors are errc::format");
    return 0;
  }
  fuzz::require(!index->shards.empty() && !index->weight_map.empty(), "a parsed index names shards");
  fuzz::require(std::is_sorted(index->shards.begin(), index->shards.end()) &&
                    std::adjacent_find(index->shards.begin(), index->shards.end()) == index->shards.end(),
                "shards sorted and distinct");
  for (const auto& s : index->shards) fuzz::require(is_plain_file_name(s), "shard names are plain file names");
  for (const auto& [tensor, at] : index->weight_map) fuzz::require(at < index->shards.size(), "positions in range");
  auto json = write_shard_index_json(*index);
  fuzz::require(json.has_value(), "the writer accepts what the reader accepted");
  auto again = parse_shard_index(fuzz::bytes_of(reinterpret_cast<const std::uint8_t*>(json->data()), json->size()),
                                 "fuzz re-encoded");
  fuzz::require(again.has_value(), "the written index parses");
  fuzz::require(again->total_size == index->total_size, "same total size");
  fuzz::require(by_name(*again) == by_name(*index), "same tensor -> shard map");
  return 0;
}

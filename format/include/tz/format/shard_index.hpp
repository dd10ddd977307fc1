// A sharded safetensors checkpoint's index: `model.safetensors.index.json` in the Hugging Face
// layout ({"metadata": {"total_size": N, ...}, "weight_map": {tensor: shard file, ...}}), parsed
// and written, and the shard file names Hugging Face gives (model-00001-of-00003.safetensors).
#pragma once

#include "tz/base/error.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tz::format {

// The largest index accepted: far above real ones (a 400 B-parameter model's is ~100 KB) and
// small enough that reading it whole is harmless when its size comes from a server.
inline constexpr std::uint64_t shard_index_max_bytes = 64ull << 20;

// The name transformers looks for first in a model directory.
inline constexpr std::string_view default_shard_index_name = "model.safetensors.index.json";

struct shard_index {
  // The shard files, each once, sorted bytewise (zero-padded HF names sort in shard order).
  std::vector<std::string> shards;
  // Tensor name -> position in `shards`, in the order of the file.
  std::vector<std::pair<std::string, std::size_t>> weight_map;
  // metadata.total_size when present: the tensors' bytes (transformers writes it; informative).
  std::optional<std::uint64_t> total_size;
};

// Parses an index file's bytes. `source` names it in messages. Fails with errc::format naming the
// source and what is wrong: invalid JSON, "weight_map" missing or not an object of strings, an
// empty map, a shard name that is not a plain file name (empty, ".", "..", containing '/' or '\\'
// or a NUL: shards are looked up beside the index, never elsewhere), or a total_size that is not a
// non-negative integer. A tensor listed twice keeps the last shard, as json.load does in python.
result<shard_index> parse_shard_index(std::span<const std::byte> json, std::string_view source);

// The index's JSON, as transformers writes it (metadata.total_size, weight_map sorted by tensor
// name, two-space indentation, trailing newline). Fails with errc::invalid_argument for a shard
// position out of range or a shard name that is not a plain file name.
result<std::string> write_shard_index_json(const shard_index& index);

// "model-00002-of-00005.safetensors" for shard 1 (0-based) of 5; a lone shard is
// "model.safetensors", as transformers names an unsharded checkpoint.
std::string shard_file_name(std::size_t position, std::size_t count);

// True when `name` may name a shard (see parse_shard_index).
bool is_plain_file_name(std::string_view name) noexcept;

}  // namespace tz::format

// Private to `tensorizer convert`: a model's tensors as the writers take them, in the model's
// original order, and the safetensors form of one tensor with what safetensors cannot hold.
#pragma once

#include "tz/format/encryption.hpp"
#include "tz/format/safetensors.hpp"
#include "tz/format/writer.hpp"
#include "tz/engine/loader.hpp"
#include "tz/sources/sources.hpp"

#include <boost/json.hpp>  // compiled once, in tz::format (format/json.cpp)

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

namespace tz::cli {

// The model's tensors in their original order, and how each is written: from the .tensors headers,
// or restored from the "tensorizer" metadata of each safetensors file (shards in order) that
// carries it (a file without it: its tensors in file order, as plain state_dict entries).
struct restored_model {
  std::vector<std::size_t> order;  // index positions
  // Per index position: the metadata entry restoring it, or null.
  std::vector<const boost::json::object*> described;
  std::vector<boost::json::array> keep;  // owns what `described` points into
};
result<restored_model> restore_order(const loader& reader);

// Visits every tensor in restored order (memory bounded by the walk's batches): its entry, its
// plaintext (empty for meta and zero-size tensors) and the tensor_write that reproduces it.
using write_visitor = std::function<result<void>(const format::tensor_entry&, const format::tensor_write&,
                                                 std::span<const std::byte>)>;
result<void> walk_restored(scheduler& sched, loader& reader, const restored_model& model,
                           const std::optional<format::decryption>& decryption, const write_visitor& visit);

// One tensor in safetensors form: its bytes (copied; zeros for a meta tensor) and its entry of
// the "tensorizer" metadata. dtypes safetensors lacks travel as raw U8 bytes, the metadata
// keeping the real dtype and shape for the way back.
struct st_out {
  std::vector<std::byte> bytes;
  std::string name, code;
  std::vector<std::uint64_t> shape;
  boost::json::object description;
};
st_out to_safetensors_form(const format::tensor_entry& e, const format::tensor_write& w, std::span<const std::byte> data);

// The write list for write_safetensors over `tensors` (borrowing their bytes), and the metadata
// value of key "tensorizer" describing them in this order.
std::vector<format::st_write_tensor> st_writes(const std::vector<st_out>& tensors);
std::string st_description(const std::vector<st_out>& tensors);

inline constexpr const char* st_meta_key = "tensorizer";

// Writes `reader`'s tensors as a sharded safetensors checkpoint under `out` (a local directory,
// created if missing, or an s3:// prefix ending in '/'): transformers' names and index, shards of
// at most max_shard_bytes (a larger tensor alone), in restored order. Each shard and then the
// index are published atomically (local: rename; s3: one upload each).
result<void> write_shards(scheduler& sched, loader& reader, const std::string& out, std::uint64_t max_shard_bytes,
                          const std::optional<format::decryption>& decryption, const remote_options& remote);

}  // namespace tz::cli

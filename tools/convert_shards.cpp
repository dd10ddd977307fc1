// `tensorizer convert MODEL OUT/`: a sharded safetensors checkpoint as transformers writes one
// (model-0000K-of-0000N.safetensors and model.safetensors.index.json), one shard in memory at a time.
#include "convert.hpp"

#include "tz/format/shard_index.hpp"
#include "tz/base/posix_io.hpp"
#include "tz/backends/uri.hpp"

#include <filesystem>

namespace tz::cli {

namespace {

// Shard of each tensor (in restored order), filled as transformers' split does: in order, a new
// shard when the next tensor would take the current one past the limit (a larger tensor alone).
std::vector<std::size_t> assign_shards(const loader& reader, const std::vector<std::size_t>& order,
                                       std::uint64_t max_shard_bytes, std::size_t& count) {
  std::vector<std::size_t> shard_of;
  std::uint64_t in_shard = 0;
  count = 0;
  for (std::size_t i : order) {
    const std::uint64_t n = reader.index().tensors[i].deserialized_bytes;
    if (count == 0 || (in_shard > 0 && in_shard + n > max_shard_bytes)) ++count, in_shard = 0;
    in_shard += n;
    shard_of.push_back(count - 1);
  }
  return shard_of;
}

// Writes `bytes`-producing `write(path)` to OUT + name: in place for a directory (atomically),
// through a temporary file and one upload for s3://.
result<void> publish_file(scheduler& sched, const std::string& out, const std::string& name, const remote_options& remote,
                          const std::function<result<void>(const std::string&)>& write) {
  TZ_TRY(target, output_target::create(out + name, remote));
  TZ_CHECK(write(target.path()));
  return target.publish(sched);
}

}  // namespace

result<void> write_shards(scheduler& sched, loader& reader, const std::string& out_arg, std::uint64_t max_shard_bytes,
                          const std::optional<format::decryption>& decryption, const remote_options& remote) {
  std::string out = out_arg.ends_with('/') ? out_arg : out_arg + "/";
  if (!is_remote_uri(out)) {
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    if (ec) return make_error(errc::io, "directory " + out + ": cannot create: " + ec.message());
  } else if (!out.starts_with("s3://")) {
    return make_error(errc::invalid_argument, out + ": a sharded checkpoint is written to a directory or an s3:// prefix");
  }
  TZ_TRY(model, restore_order(reader));
  std::size_t count = 0;
  const std::vector<std::size_t> shard_of = assign_shards(reader, model.order, max_shard_bytes, count);
  format::shard_index index;
  for (std::size_t s = 0; s < count; ++s) index.shards.push_back(format::shard_file_name(s, count));
  index.total_size = 0;
  std::vector<st_out> pending;  // the current shard's tensors
  std::size_t visited = 0;
  TZ_CHECK(walk_restored(sched, reader, model, decryption,
                         [&](const format::tensor_entry& e, const format::tensor_write& w,
                             std::span<const std::byte> data) -> result<void> {
                           const std::size_t shard = shard_of[visited++];
                           pending.push_back(to_safetensors_form(e, w, data));
                           index.weight_map.emplace_back(pending.back().name, shard);
                           *index.total_size += pending.back().bytes.size();
                           if (visited < shard_of.size() && shard_of[visited] == shard) return {};
                           // transformers' own metadata first: its loader refuses shards without it.
                           const format::st_metadata metadata{{"format", "pt"}, {st_meta_key, st_description(pending)}};
                           const auto writes = st_writes(pending);
                           TZ_CHECK(publish_file(sched, out, index.shards[shard], remote, [&](const std::string& path) {
                             return format::write_safetensors(path, writes, metadata);
                           }));
                           pending.clear();
                           return {};
                         }));
  if (count <= 1) return {};  // one shard is model.safetensors, without an index (as transformers)
  TZ_TRY(json, format::write_shard_index_json(index));
  return publish_file(sched, out, std::string(format::default_shard_index_name), remote, [&](const std::string& path) {
    return write_file_atomically(path, std::as_bytes(std::span(json)));
  });
}

}  // namespace tz::cli

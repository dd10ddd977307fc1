// Resolving a model's inputs (a file, an index, a directory, a remote prefix, several files) into
// one loader: the index is read first, then every shard it names is opened beside it.
#include "tz/sources/checkpoint.hpp"

#include "tz/backends/file_source.hpp"
#include "tz/backends/uri.hpp"

#include <algorithm>
#include <filesystem>

namespace tz {

namespace {

namespace fs = std::filesystem;

bool ends_with(std::string_view s, std::string_view suffix) noexcept {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

result<std::shared_ptr<byte_source>> open_one(const std::string& file_or_uri, const checkpoint_options& o) {
  if (is_remote_uri(file_or_uri) || !o.direct) return open_any(file_or_uri, o.remote);
  TZ_TRY(file, file_source::open(file_or_uri, {true, false}));
  return std::shared_ptr<byte_source>(std::move(file));
}

// What a local directory holds that could be a model: an index, else safetensors files, else one
// .tensors file. Several indexes or several .tensors files are ambiguous.
result<std::vector<std::string>> directory_inputs(const std::string& dir) {
  std::vector<std::string> indexes, safetensors, tensors;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(ec)) continue;
    if (name == format::default_shard_index_name) return std::vector<std::string>{entry.path().string()};
    if (ends_with(name, ".safetensors.index.json")) indexes.push_back(entry.path().string());
    else if (ends_with(name, ".safetensors")) safetensors.push_back(entry.path().string());
    else if (ends_with(name, ".tensors")) tensors.push_back(entry.path().string());
  }
  if (ec) return make_error(errc::io, "directory " + dir + ": cannot list: " + ec.message());
  for (auto* v : {&indexes, &safetensors, &tensors}) std::sort(v->begin(), v->end());
  auto ambiguous = [&dir](const std::vector<std::string>& found, const char* what) {
    std::string names;
    for (const auto& f : found) names += (names.empty() ? "" : ", ") + fs::path(f).filename().string();
    return make_error(errc::invalid_argument, "directory " + dir + " holds several " + what + " (" + names +
                                                  "): name the one to load");
  };
  if (indexes.size() > 1) return ambiguous(indexes, "*.safetensors.index.json files");
  if (indexes.size() == 1) return indexes;
  if (!safetensors.empty()) return safetensors;
  if (tensors.size() > 1) return ambiguous(tensors, ".tensors files");
  if (tensors.size() == 1) return tensors;
  return make_error(errc::not_found, "directory " + dir + " holds no " + std::string(format::default_shard_index_name) +
                                         ", *.safetensors or *.tensors file");
}

// Where the shards of the index at `location` are: everything up to its last '/'.
result<std::string> shard_base(const std::string& location) {
  if (is_remote_uri(location) && location.find_first_of("?#") != std::string::npos)
    return make_error(errc::invalid_argument, location + ": an index URI with a query string or fragment cannot "
                                                         "name its shards (they are looked up beside it)");
  const auto slash = location.find_last_of('/');
  return slash == std::string::npos ? std::string() : location.substr(0, slash + 1);
}

// Reads and parses the index at `location`, then opens it and its shards as one loader.
result<loader> open_index(scheduler& sched, const std::string& location, const checkpoint_options& o) {
  TZ_TRY(base, shard_base(location));
  TZ_TRY(source, open_one(location, o));
  TZ_TRY(size, size_blocking(sched, *source));
  if (size > format::shard_index_max_bytes)
    return make_error(errc::format, source->name() + ": sharded checkpoint index is " + std::to_string(size) +
                                        " bytes, over the limit of " + std::to_string(format::shard_index_max_bytes));
  std::vector<std::byte> bytes(size);
  TZ_CHECK(read_blocking(sched, *source, 0, bytes));
  TZ_TRY(index, format::parse_shard_index(bytes, source->name()));
  std::vector<shard_file> shards;
  for (const auto& name : index.shards) {
    TZ_TRY(shard, open_one(base + name, o));
    shards.push_back({name, std::move(shard)});
  }
  return loader::open_shards(sched, source->name(), std::move(shards), std::move(index));
}

// Several files as shards without an index, each named by its location.
result<loader> open_files(scheduler& sched, std::string name, std::span<const std::string> files,
                          const checkpoint_options& o) {
  std::vector<shard_file> shards;
  for (const auto& f : files) {
    TZ_TRY(source, open_one(f, o));
    shards.push_back({f, std::move(source)});
  }
  return loader::open_shards(sched, std::move(name), std::move(shards));
}

}  // namespace

result<loader> open_checkpoint(scheduler& sched, std::span<const std::string> inputs, const checkpoint_options& o) {
  if (inputs.empty()) return make_error(errc::invalid_argument, "no model file, index, directory or URI given");
  if (!is_remote_uri(inputs.front())) start_io_rings(sched);
  if (inputs.size() > 1)
    return open_files(sched, std::to_string(inputs.size()) + " files (" + inputs.front() + " ... " + inputs.back() + ")",
                      inputs, o);
  const std::string& input = inputs.front();
  if (ends_with(input, ".index.json")) return open_index(sched, input, o);
  if (is_remote_uri(input)) {
    if (ends_with(input, "/") && !input.starts_with("redis://")) {
      TZ_CHECK(parse_uri(input));  // "http://" is a malformed URI, not a prefix
      return open_index(sched, input + std::string(format::default_shard_index_name), o);
    }
  } else if (std::error_code ec; fs::is_directory(input, ec)) {
    TZ_TRY(found, directory_inputs(input));
    if (found.size() == 1 && ends_with(found.front(), ".index.json")) return open_index(sched, found.front(), o);
    if (found.size() > 1)
      return open_files(sched, "directory " + input + " (" + std::to_string(found.size()) + " safetensors files)", found, o);
    TZ_TRY(source, open_one(found.front(), o));
    return loader::open(sched, std::move(source));
  }
  TZ_TRY(source, open_one(input, o));
  return loader::open(sched, std::move(source));
}

std::string cache_status(const loader& l) {
  if (l.shards().empty()) return cache_status(l.source());
  std::string out;
  for (const auto& s : l.shards()) {
    const std::string one = s.source ? cache_status(*s.source) : std::string();
    if (!one.empty()) out += (out.empty() ? "" : "; ") + s.name + ": " + one;
  }
  return out;
}

}  // namespace tz

// model.safetensors.index.json: parsing (validated, bounded) and writing as transformers does.
#include "tz/format/shard_index.hpp"
#include "tz/format/tensor_path.hpp"

// Boost.JSON's implementation is compiled once for the project, in format/json.cpp.
#include <boost/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>

namespace tz::format {
namespace {

namespace json = boost::json;

error index_error(std::string_view source, const std::string& what) {
  return make_error(errc::format, std::string(source) + ": sharded checkpoint index " + what);
}

// A JSON string as Python's json.dumps writes it (transformers' index files).
std::string python_json_string(std::string_view s) {
  std::string out;
  append_python_json_string(out, s);
  return out;
}

}  // namespace

bool is_plain_file_name(std::string_view name) noexcept {
  return !name.empty() && name != "." && name != ".." && name.find_first_of(std::string_view("/\\\0", 3)) == std::string_view::npos;
}

result<shard_index> parse_shard_index(std::span<const std::byte> bytes, std::string_view source) {
  if (bytes.size() > shard_index_max_bytes)
    return index_error(source, "is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                                   std::to_string(shard_index_max_bytes));
  boost::system::error_code ec;
  json::value root = json::parse(json::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), ec);
  if (ec) return index_error(source, "is not valid JSON: " + ec.message());
  const auto* object = root.if_object();
  if (!object) return index_error(source, "is a JSON " + std::string(json::to_string(root.kind())) + ", expected an object");
  shard_index out;
  if (const auto* meta = object->if_contains("metadata"); meta && !meta->is_null()) {
    const auto* m = meta->if_object();
    if (!m) return index_error(source, "\"metadata\" is " + json::serialize(*meta) + ", expected an object");
    if (const auto* total = m->if_contains("total_size"); total && !total->is_null()) {
      if (total->is_uint64()) out.total_size = total->get_uint64();
      else if (total->is_int64() && total->get_int64() >= 0) out.total_size = static_cast<std::uint64_t>(total->get_int64());
      else if (total->is_double() && total->get_double() >= 0 && total->get_double() < 1.8e19 &&
               total->get_double() == static_cast<double>(static_cast<std::uint64_t>(total->get_double())))
        out.total_size = static_cast<std::uint64_t>(total->get_double());  // some writers emit 1.0e10
      else return index_error(source, "\"metadata\".\"total_size\" is " + json::serialize(*total) +
                                          ", expected a non-negative integer");
    }
  }
  const auto* map_value = object->if_contains("weight_map");
  if (!map_value) return index_error(source, "has no \"weight_map\"");
  const auto* map = map_value->if_object();
  if (!map) return index_error(source, "\"weight_map\" is " + json::serialize(*map_value) + ", expected an object");
  if (map->empty()) return index_error(source, "\"weight_map\" is empty");
  std::map<std::string, std::size_t, std::less<>> last;  // a repeated key keeps its last value
  std::vector<std::pair<std::string, std::string>> named;
  for (const auto& kv : *map) {
    const auto* file = kv.value().if_string();
    if (!file || !is_plain_file_name(*file))
      return index_error(source, "\"weight_map\" entry " + json::serialize(kv.key()) + " is " +
                                     json::serialize(kv.value()) + ", expected the file name of a shard beside the index");
    std::string name(kv.key());
    if (auto it = last.find(name); it != last.end()) named[it->second].second = std::string(*file);
    else last.emplace(name, named.size()), named.emplace_back(std::move(name), std::string(*file));
  }
  for (const auto& [name, file] : named) out.shards.push_back(file);
  std::sort(out.shards.begin(), out.shards.end());
  out.shards.erase(std::unique(out.shards.begin(), out.shards.end()), out.shards.end());
  for (auto& [name, file] : named) {
    const auto at = std::lower_bound(out.shards.begin(), out.shards.end(), file) - out.shards.begin();
    out.weight_map.emplace_back(std::move(name), static_cast<std::size_t>(at));
  }
  return out;
}

result<std::string> write_shard_index_json(const shard_index& index) {
  for (const auto& s : index.shards)
    if (!is_plain_file_name(s)) return make_error(errc::invalid_argument, "shard name \"" + s + "\" is not a plain file name");
  std::vector<const std::pair<std::string, std::size_t>*> sorted;
  for (const auto& entry : index.weight_map) {
    if (entry.second >= index.shards.size())
      return make_error(errc::invalid_argument, "tensor " + entry.first + ": shard position " +
                                                    std::to_string(entry.second) + " out of range");
    sorted.push_back(&entry);
  }
  // sort_keys sorts by code point; UTF-8's byte order is the same order.
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
  std::string out = "{\n  \"metadata\": {";
  if (index.total_size) out += "\n    \"total_size\": " + std::to_string(*index.total_size) + "\n  ";
  out += "},\n  \"weight_map\": {";
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    out += i ? ",\n    " : "\n    ";
    out += python_json_string(sorted[i]->first) + ": " + python_json_string(index.shards[sorted[i]->second]);
  }
  out += sorted.empty() ? "}\n}\n" : "\n  }\n}\n";
  return out;
}

std::string shard_file_name(std::size_t position, std::size_t count) {
  if (count <= 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", position + 1, count);
  return buf;
}

}  // namespace tz::format

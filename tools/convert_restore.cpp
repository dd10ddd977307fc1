// `tensorizer convert`: restoring a model's original order and tensor kinds from the "tensorizer"
// metadata that safetensors output carries, and the safetensors form of one tensor.
#include "convert.hpp"
#include "tensor_walk.hpp"

#include <cstring>
#include <unordered_map>

namespace tz::cli {

namespace {

namespace json = boost::json;

error bad_metadata(const std::string& file, const std::string& what) {
  return make_error(errc::format, file + ": __metadata__ \"" + std::string(st_meta_key) + "\": " + what);
}

// The "tensorizer" array of one file's metadata, or an empty array when it has none.
result<json::array> described_array(const std::vector<std::pair<std::string, std::string>>& metadata,
                                    const std::string& file) {
  for (const auto& [k, v] : metadata) {
    if (k != st_meta_key) continue;
    boost::system::error_code ec;
    auto parsed = json::parse(v, ec);
    if (ec || !parsed.is_array()) return bad_metadata(file, "is not a JSON array");
    return std::move(parsed.as_array());
  }
  return json::array();
}

// Checks one metadata entry's fields (types) so that applying it cannot throw.
result<void> check_entry(const json::object& o, const std::string& file) {
  auto has = [&o](const char* key, json::kind k) { return o.contains(key) && o.at(key).kind() == k; };
  const bool ok = has("name", json::kind::string) && has("stored_name", json::kind::string) &&
                  (has("type", json::kind::int64) || has("type", json::kind::uint64)) &&
                  (has("module_index", json::kind::int64) || has("module_index", json::kind::uint64)) &&
                  has("meta", json::kind::bool_) &&
                  (!o.contains("raw_dtype") || (has("raw_dtype", json::kind::string) && has("raw_shape", json::kind::array)));
  if (!ok) return bad_metadata(file, "entry " + json::serialize(o) + " lacks a field or has one of the wrong type");
  return {};
}

}  // namespace

result<restored_model> restore_order(const loader& reader) {
  struct file_part {
    std::string name;
    std::size_t first, count;
    const std::vector<std::pair<std::string, std::string>>* metadata;
  };
  const auto& index = reader.index();
  std::vector<file_part> files;
  if (reader.shards().empty()) files.push_back({index.source, 0, index.tensors.size(), &index.st_metadata});
  for (const auto& s : reader.shards()) files.push_back({s.source_name, s.first_tensor, s.tensor_count, &s.metadata});
  restored_model out;
  out.described.assign(index.tensors.size(), nullptr);
  out.keep.reserve(files.size());
  for (const auto& f : files) {
    TZ_TRY(items, described_array(*f.metadata, f.name));
    if (items.empty()) {
      for (std::size_t i = f.first; i < f.first + f.count; ++i) out.order.push_back(i);
      continue;
    }
    if (items.size() != f.count)
      return bad_metadata(f.name, "describes " + std::to_string(items.size()) + " tensors, the file holds " +
                                      std::to_string(f.count));
    std::unordered_map<std::string_view, std::size_t> by_name;
    for (std::size_t i = f.first; i < f.first + f.count; ++i) by_name.emplace(index.tensors[i].name, i);
    auto& kept = out.keep.emplace_back(std::move(items));
    for (const auto& item : kept) {
      if (!item.is_object()) return bad_metadata(f.name, "entry " + json::serialize(item) + " is not an object");
      const auto& o = item.as_object();
      TZ_CHECK(check_entry(o, f.name));
      auto it = by_name.find(std::string_view(o.at("name").as_string()));
      if (it == by_name.end() || out.described[it->second] != nullptr)
        return bad_metadata(f.name, "names tensor " + json::serialize(o.at("name")) + ", which the file does not hold once");
      out.described[it->second] = &o;
      out.order.push_back(it->second);
    }
  }
  return out;
}

namespace {

// The tensor_write reproducing tensor `e` (read with header `h`, null for safetensors).
result<format::tensor_write> restored_write(const format::tensor_entry& e, const format::tensor_header* h,
                                            std::span<const std::byte> data, const json::object* d,
                                            const std::string& source) {
  format::tensor_write w = as_write(e, h, data);
  if (!h) {
    // A packed sub-byte safetensors dtype (F4, F6_*) has no .tensors equivalent.
    if (auto st = format::find_st_dtype(e.dtype.stored); st && st->bits % 8 != 0)
      return make_error(errc::unsupported, source + ": tensor " + e.name + " has dtype " + e.dtype.stored +
                                               ", which a .tensors file cannot hold");
  }
  if (d == nullptr) return w;
  TZ_TRY(path, format::decode_name(std::string(d->at("stored_name").as_string())));
  w.path = std::move(path);
  w.type = static_cast<format::tensor_type>(d->at("type").to_number<int>() & 3);
  w.module_index = d->at("module_index").to_number<std::uint16_t>();
  w.meta = d->at("meta").as_bool();
  if (w.meta) w.data = {};
  if (d->contains("raw_dtype")) {
    TZ_TRY(raw, format::parse_dtype(std::string(d->at("raw_dtype").as_string())));
    w.dtype = std::move(raw);
    w.shape.clear();
    for (const auto& dim : d->at("raw_shape").as_array()) {
      if (!dim.is_number()) return bad_metadata(source, "raw_shape of " + e.name + " is not a list of integers");
      w.shape.push_back(dim.to_number<std::uint64_t>());
    }
  }
  return w;
}

}  // namespace

result<void> walk_restored(scheduler& sched, loader& reader, const restored_model& model,
                           const std::optional<format::decryption>& decryption, const write_visitor& visit) {
  walk_options o{.verify = true, .decryption = decryption};
  o.order = model.order;
  const std::string& source = reader.source().name();
  return walk_tensors(sched, reader, o,
                      [&](std::size_t i, const format::tensor_entry& e, const format::tensor_header* h,
                          std::span<const std::byte> data) -> result<void> {
                        try {
                          TZ_TRY(w, restored_write(e, h, data, model.described[i], source));
                          return visit(e, w, data);
                        } catch (const std::exception& x) {  // a number out of range in the metadata
                          return bad_metadata(source, std::string("entry of ") + e.name + ": " + x.what());
                        }
                      });
}

st_out to_safetensors_form(const format::tensor_entry& e, const format::tensor_write& w,
                           std::span<const std::byte> data) {
  st_out t;
  t.name = format::display_name(w.path);
  auto& d = t.description;
  d["name"] = t.name;
  d["stored_name"] = format::encode_name(w.path);
  d["type"] = static_cast<int>(w.type);
  d["module_index"] = w.module_index;
  d["meta"] = w.meta;
  auto code = format::tensorizer_dtype_to_st(w.dtype);
  t.code = code ? *code : "U8";
  t.bytes.resize(w.meta ? e.deserialized_bytes : data.size());
  if (!w.meta && !data.empty()) std::memcpy(t.bytes.data(), data.data(), data.size());
  if (code) {
    t.shape = w.shape;
  } else {
    d["raw_dtype"] = w.dtype.stored;
    json::array dims;
    for (auto x : w.shape) dims.push_back(x);
    d["raw_shape"] = std::move(dims);
    t.shape = {t.bytes.size()};
  }
  return t;
}

std::vector<format::st_write_tensor> st_writes(const std::vector<st_out>& tensors) {
  std::vector<format::st_write_tensor> out;
  for (const auto& t : tensors) out.push_back({t.name, t.code, t.shape, t.bytes});
  return out;
}

std::string st_description(const std::vector<st_out>& tensors) {
  json::array info;
  for (const auto& t : tensors) info.push_back(t.description);
  return json::serialize(info);
}

}  // namespace tz::cli

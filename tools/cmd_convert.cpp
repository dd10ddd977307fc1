// tensorizer convert: lossless safetensors <-> .tensors conversion, chosen by file extension.
#include "cli.hpp"
#include "remote_args.hpp"
#include "tensor_walk.hpp"
#include "tz/format/safetensors.hpp"
#include "tz/posix_io.hpp"
#include "tz/format/writer.hpp"

#include <boost/json.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstring>

using namespace tz;

namespace {

constexpr const char* convert_help =
    "usage: tensorizer convert [--decrypt-key-file F | --decrypt-passphrase-file F] [remote options] IN OUT\n"
    "  Converts between safetensors (*.safetensors) and tensorizer (*.tensors), by extension.\n"
    "  .tensors -> safetensors keeps what safetensors cannot express (tensor type, module index,\n"
    "  structured paths, meta tensors, file order) in the __metadata__ key \"tensorizer\", so the\n"
    "  way back restores them: a 2.11.1 file converted there and back is byte-identical.\n"
    "  IN may be remote (a remote safetensors IN is downloaded to a temporary file first); OUT may be\n"
    "  s3://bucket/key, or redis://host:port/prefix for a .tensors OUT.\n";

constexpr const char* meta_key = "tensorizer";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}


// The "tensorizer" metadata entry for one tensor: what safetensors itself cannot hold.
boost::json::object describe(const format::tensor_entry& e, std::uint16_t module_index) {
  boost::json::object o;
  o["name"] = format::display_name(e.path);
  o["stored_name"] = e.name;
  o["type"] = static_cast<int>(e.type);
  o["module_index"] = module_index;
  o["meta"] = e.is_meta();
  return o;
}

result<void> tensors_to_safetensors(scheduler& sched, loader& reader, const std::string& out, const cli::args& a) {
  TZ_TRY(decryption, cli::decryption_from(a));
  std::vector<std::vector<std::byte>> owned;  // plaintext copies (decrypted data, meta zeros)
  std::vector<format::st_write_tensor> tensors;
  boost::json::array info;
  const auto& index = reader.index();
  owned.reserve(index.tensors.size());
  TZ_CHECK(cli::walk_tensors(sched, reader, {.verify = true, .decryption = decryption},
                             [&](std::size_t, const format::tensor_entry& e, const format::tensor_header& h,
                                 std::span<const std::byte> data) -> result<void> {
                               // dtypes safetensors lacks (complex, ...) travel as raw U8 bytes; the
                               // metadata keeps the real dtype and shape for the way back.
                               auto st_code = format::tensorizer_dtype_to_st(e.dtype);
                               auto d = describe(e, h.module_index);
                               if (!st_code) d["raw_dtype"] = e.dtype.stored;
                               const std::string code = st_code ? *st_code : "U8";
                               auto& bytes = owned.emplace_back(e.is_meta() ? e.deserialized_bytes : data.size());
                               if (!e.is_meta()) std::memcpy(bytes.data(), data.data(), data.size());
                               const auto shape = st_code ? e.shape : std::vector<std::uint64_t>{bytes.size()};
                               if (!st_code) {
                                 boost::json::array dims;
                                 for (auto x : e.shape) dims.push_back(x);
                                 d["raw_shape"] = std::move(dims);
                               }
                               tensors.push_back({format::display_name(e.path), code, shape, bytes});
                               info.push_back(std::move(d));
                               return {};
                             }));
  format::st_metadata metadata{{meta_key, boost::json::serialize(info)}};
  return format::write_safetensors(out, tensors, metadata);
}

result<void> safetensors_to_tensors(const std::string& in, const std::string& out) {
  TZ_TRY(index, format::read_safetensors_index(in));
  TZ_TRY(m, mapped_file::open(in));
  // Restore tensorizer's order, types, module indices and paths when the file came from us.
  boost::json::array info;
  for (const auto& [k, v] : index.metadata)
    if (k == meta_key) {
      boost::system::error_code ec;
      auto parsed = boost::json::parse(v, ec);
      if (!ec && parsed.is_array()) info = parsed.as_array();
    }
  std::vector<const format::st_tensor*> order;
  std::vector<const boost::json::object*> extra;
  if (!info.empty()) {
    for (const auto& item : info) {
      if (!item.is_object() || !item.as_object().contains("name")) return make_error(errc::format, in + ": bad tensorizer metadata");
      const auto* t = index.find(std::string(item.as_object().at("name").as_string()));
      if (!t) return make_error(errc::format, in + ": tensorizer metadata names a missing tensor");
      order.push_back(t), extra.push_back(&item.as_object());
    }
  } else {
    for (const auto& t : index.tensors) order.push_back(&t), extra.push_back(nullptr);
  }
  TZ_TRY(writer, format::tensor_writer::create(out));
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& t = *order[i];
    TZ_TRY(dtype, format::st_dtype_to_tensorizer(t.dtype));
    format::tensor_write w{format::plain_path(t.name), format::tensor_type::state_dict, 0, dtype, t.shape,
                           m.bytes().subspan(t.data_begin, t.size_bytes()), false};
    if (const auto* x = extra[i]) {
      TZ_TRY(path, format::decode_name(std::string(x->at("stored_name").as_string())));
      w.path = std::move(path);
      w.type = static_cast<format::tensor_type>(x->at("type").to_number<int>() & 3);
      w.module_index = x->at("module_index").to_number<std::uint16_t>();
      w.meta = x->at("meta").as_bool();
      if (w.meta) w.data = {};
      if (x->contains("raw_dtype")) {
        TZ_TRY(raw, format::parse_dtype(std::string(x->at("raw_dtype").as_string())));
        w.dtype = std::move(raw);
        w.shape.clear();
        for (const auto& dim : x->at("raw_shape").as_array()) w.shape.push_back(dim.to_number<std::uint64_t>());
      }
    }
    TZ_CHECK(writer.write(w));
  }
  return writer.close();
}

// Converts IN (path or URI) to OUT (path, s3:// or redis://) in the direction the extensions name.
result<void> convert(const std::string& in, const std::string& out, bool to_safetensors, const cli::args& a) {
  TZ_TRY(remote, cli::remote_options_from(a));
  tz::scheduler sched;
  TZ_TRY(target, tz::output_target::create(out, remote));
  if (to_safetensors) {
    TZ_TRY(reader, cli::open_loader(sched, in, remote));
    TZ_CHECK(tensors_to_safetensors(sched, reader, target.path(), a));
  } else {
    TZ_TRY(local, tz::local_input::fetch(sched, in, remote));
    TZ_CHECK(safetensors_to_tensors(local.path(), target.path()));
  }
  return target.publish(sched);
}

}  // namespace

int cmd_convert(int argc, char** argv) {
  const std::string help = std::string(convert_help) + cli::remote_help;
  auto a = cli::parse(argc, argv, 2, cli::with_remote_valued(cli::decrypt_options), cli::with_remote_flags({"--help"}));
  if (!a) return cli::usage_error("convert", a.error().message, help.c_str());
  if (a->has("--help")) return std::printf("%s", help.c_str()), 0;
  if (a->positional.size() != 2) return cli::usage_error("convert", "expected IN and OUT", help.c_str());
  const auto& in = a->positional[0];
  const auto& out = a->positional[1];
  result<void> r;
  if (ends_with(in, ".tensors") && ends_with(out, ".safetensors")) r = convert(in, out, true, *a);
  else if (ends_with(in, ".safetensors") && ends_with(out, ".tensors")) r = convert(in, out, false, *a);
  else return cli::usage_error("convert", "expected a .tensors and a .safetensors file, one each", help.c_str());
  if (!r) return cli::fail("convert", r.error());
  return 0;
}

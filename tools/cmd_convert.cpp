// tensorizer convert: lossless conversion between .tensors, safetensors and sharded safetensors
// checkpoints, in the direction OUT names (a .tensors file, a .safetensors file, a directory).
#include "cli.hpp"
#include "convert.hpp"
#include "remote_args.hpp"
#include "tensor_walk.hpp"

#include <cstdio>

using namespace tz;

namespace {

constexpr const char* convert_help =
    "usage: tensorizer convert [options] MODEL... OUT\n"
    "  Converts MODEL (see below) into the form OUT names:\n"
    "    OUT.tensors      one .tensors file (OUT may be redis://host:port/prefix)\n"
    "    OUT.safetensors  one safetensors file\n"
    "    OUT/             a sharded safetensors checkpoint in directory OUT (or under an s3:// prefix):\n"
    "                     model-0000K-of-0000N.safetensors and model.safetensors.index.json, as\n"
    "                     transformers writes them; a single shard is model.safetensors, no index\n"
    "  --max-shard-size SIZE   most tensor bytes per shard (default 5GB = 5e9, as transformers;\n"
    "                          K/M/G/T = powers of 1000, KiB/MiB/GiB/TiB = of 1024); a larger\n"
    "                          tensor gets a shard of its own\n"
    "  --decrypt-key-file F | --decrypt-passphrase-file F   open an encrypted MODEL\n"
    "  What safetensors cannot express (tensor type, module index, structured paths, meta tensors,\n"
    "  order, dtypes it lacks) travels in each safetensors file's __metadata__ key \"tensorizer\", so\n"
    "  converting back restores it: a 2.11.1 file converted to one safetensors file or to shards and\n"
    "  back is byte-identical. Every stored hash of MODEL is checked on the way. OUT may be remote\n"
    "  (written locally, then uploaded).\n";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "5GB" = 5e9, "2GiB" = 2^31, "123" bytes: transformers' convert_file_size_to_int units.
result<std::uint64_t> parse_shard_size(const std::string& text) {
  static const std::pair<const char*, std::uint64_t> units[] = {
      {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {"TiB", 1ull << 40},
      {"KB", 1'000},       {"MB", 1'000'000},   {"GB", 1'000'000'000}, {"TB", 1'000'000'000'000}, {"B", 1}};
  std::uint64_t scale = 1;
  std::string digits = text;
  for (const auto& [suffix, factor] : units) {
    if (ends_with(text, suffix)) {
      digits = text.substr(0, text.size() - std::string(suffix).size());
      scale = factor;
      break;
    }
  }
  auto n = cli::to_uint("--max-shard-size", digits);
  if (!n || *n == 0 || *n > UINT64_MAX / scale)
    return make_error(errc::invalid_argument, "--max-shard-size expects a positive size such as 5GB, 500MB or 2GiB, got '" +
                                                  text + "'");
  return *n * scale;
}

result<void> to_tensors(scheduler& sched, loader& reader, const std::string& out,
                        const std::optional<format::decryption>& decryption) {
  TZ_TRY(model, cli::restore_order(reader));
  TZ_TRY(writer, format::tensor_writer::create(out));
  TZ_CHECK(cli::walk_restored(sched, reader, model, decryption,
                              [&](const format::tensor_entry&, const format::tensor_write& w,
                                  std::span<const std::byte>) { return writer.write(w); }));
  return writer.close();
}

result<void> to_safetensors(scheduler& sched, loader& reader, const std::string& out,
                            const std::optional<format::decryption>& decryption) {
  TZ_TRY(model, cli::restore_order(reader));
  std::vector<cli::st_out> tensors;
  TZ_CHECK(cli::walk_restored(sched, reader, model, decryption,
                              [&](const format::tensor_entry& e, const format::tensor_write& w,
                                  std::span<const std::byte> data) -> result<void> {
                                tensors.push_back(cli::to_safetensors_form(e, w, data));
                                return {};
                              }));
  const format::st_metadata metadata{{cli::st_meta_key, cli::st_description(tensors)}};
  return format::write_safetensors(out, cli::st_writes(tensors), metadata);
}

// Converts MODEL (inputs) to OUT in the form OUT names.
result<void> convert(const std::vector<std::string>& inputs, const std::string& out, const cli::args& a) {
  TZ_TRY(remote, cli::remote_options_from(a));
  TZ_TRY(decryption, cli::decryption_from(a));
  const bool to_st = ends_with(out, ".safetensors"), to_tz = ends_with(out, ".tensors");
  std::uint64_t max_shard = 5'000'000'000;
  if (auto v = a.get("--max-shard-size")) {
    if (to_st || to_tz) return make_error(errc::invalid_argument, "--max-shard-size applies to a directory OUT (OUT/)");
    TZ_TRY(n, parse_shard_size(*v));
    max_shard = n;
  }
  tz::scheduler sched;
  TZ_TRY(reader, cli::open_loader(sched, inputs, remote));
  if (!to_st && !to_tz) return cli::write_shards(sched, reader, out, max_shard, decryption, remote);
  TZ_TRY(target, tz::output_target::create(out, remote));
  if (to_st) TZ_CHECK(to_safetensors(sched, reader, target.path(), decryption));
  else TZ_CHECK(to_tensors(sched, reader, target.path(), decryption));
  return target.publish(sched);
}

}  // namespace

int cmd_convert(int argc, char** argv) {
  const std::string help = std::string(convert_help) + cli::model_help + cli::remote_help;
  auto valued = cli::with_remote_valued(cli::decrypt_options);
  valued.push_back("--max-shard-size");
  auto a = cli::parse(argc, argv, 2, valued, cli::with_remote_flags({"--help"}));
  if (!a) return cli::usage_error("convert", a.error().message, help.c_str());
  if (a->has("--help")) return std::printf("%s", help.c_str()), 0;
  if (a->positional.size() < 2) return cli::usage_error("convert", "expected MODEL and OUT", help.c_str());
  const std::vector<std::string> inputs(a->positional.begin(), a->positional.end() - 1);
  const std::string& out = a->positional.back();
  if (auto r = convert(inputs, out, *a); !r) {
    if (r.error().code == errc::invalid_argument && r.error().message.starts_with("--max-shard-size"))
      return cli::usage_error("convert", r.error().message, help.c_str());
    return cli::fail("convert", r.error());
  }
  return 0;
}

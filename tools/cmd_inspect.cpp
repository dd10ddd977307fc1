// tensorizer inspect: the layout of a model (.tensors, safetensors, or a checkpoint sharded over
// safetensors files), read from its index and tensor headers, no data.
#include "cli.hpp"
#include "remote_args.hpp"
#include "tensor_walk.hpp"
#include "tz/engine/loader.hpp"

#include <cstdio>
#include <string>

using namespace tz;

namespace {

constexpr const char* inspect_help =
    "usage: tensorizer inspect [--json] [remote options] MODEL...\n"
    "  .tensors: prints the data version, feature flags and, per tensor: name, dtype, shape, tensor\n"
    "  type, module index, header offset, data offset and data length. safetensors (one file or a\n"
    "  sharded checkpoint): per tensor its name, dtype, shape, shard, data offset (in its shard) and\n"
    "  data length.\n";
std::string shape_json(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// The shard holding tensor i of a sharded loader (nullptr for one file).
const shard_span* shard_of(const loader& l, std::size_t i) {
  for (const auto& s : l.shards())
    if (i >= s.first_tensor && i < s.first_tensor + s.tensor_count) return &s;
  return nullptr;
}

// inspect of a safetensors file or sharded checkpoint: no per-tensor headers to read.
void inspect_safetensors(const loader& l, bool json) {
  const auto& index = l.index();
  if (json) {
    std::printf("{\"format\":\"safetensors\",\"shards\":[");
    for (std::size_t k = 0; k < l.shards().size(); ++k) {
      const auto& s = l.shards()[k];
      std::printf("%s{\"name\":%s,\"tensors\":%zu,\"bytes\":%llu}", k ? "," : "", format::json_name(format::plain_path(s.name)).c_str(),
                  s.tensor_count, static_cast<unsigned long long>(s.bytes));
    }
    std::printf("],\"tensors\":[");
  } else {
    std::printf("safetensors, %zu tensors, %llu data bytes", index.tensors.size(),
                static_cast<unsigned long long>(index.header.tensor_size));
    if (!l.shards().empty()) std::printf(", %zu shards", l.shards().size());
    std::printf("\n");
  }
  for (std::size_t i = 0; i < index.tensors.size(); ++i) {
    const auto& e = index.tensors[i];
    const shard_span* s = shard_of(l, i);
    const std::uint64_t offset = e.data_offset - (s ? s->base : 0);
    const auto dtype = format::dtype_display(e.dtype);
    if (json) {
      std::printf("%s{\"name\":%s,\"dtype\":\"%s\",\"shape\":%s,\"shard\":%s,\"data_offset\":%llu,\"data_length\":%llu}",
                  i ? "," : "", format::json_name(e.path).c_str(), dtype.c_str(), shape_json(e.shape).c_str(),
                  s ? format::json_name(format::plain_path(s->name)).c_str() : "null", static_cast<unsigned long long>(offset),
                  static_cast<unsigned long long>(e.data_length));
    } else {
      std::printf("%-40s %-10s %-18s %s%sdata @%llu +%llu\n", format::display_name(e.path).c_str(), dtype.c_str(),
                  shape_json(e.shape).c_str(), s ? s->name.c_str() : "", s ? " " : "",
                  static_cast<unsigned long long>(offset), static_cast<unsigned long long>(e.data_length));
    }
  }
  if (json) std::printf("]}\n");
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  const auto help = cli::help_of(inspect_help);
  auto a = cli::parse(argc, argv, 2, cli::with_remote_valued(cli::decrypt_options), cli::with_remote_flags({"--json", "--help"}));
  if (!a) return cli::usage_error("inspect", a.error().message, help.c_str());
  if (a->has("--help")) return std::printf("%s", help.c_str()), 0;
  if (a->positional.empty()) return cli::usage_error("inspect", "expected a MODEL", help.c_str());
  tz::scheduler sched;
  auto reader = cli::open_model(sched, *a);
  if (!reader) return cli::fail("inspect", reader.error());
  const auto& index = reader->index();
  const bool json = a->has("--json");
  if (reader->kind() == file_kind::safetensors) return inspect_safetensors(*reader, json), 0;
  if (json) std::printf("{\"version\":%u,\"flags\":%llu,\"tensors\":[", index.header.version,
                        static_cast<unsigned long long>(index.header.flags));
  else std::printf("version %u, flags %llu, %zu tensors, %llu data bytes\n", index.header.version,
                   static_cast<unsigned long long>(index.header.flags), index.tensors.size(),
                   static_cast<unsigned long long>(index.header.tensor_size));
  // The module index lives only in the tensor headers: read them all (in parallel), no data.
  auto headers = reader->read_headers(sched);
  if (!headers) return cli::fail("inspect", headers.error());
  for (std::size_t i = 0; i < index.tensors.size(); ++i) {
    const auto& e = index.tensors[i];
    const auto* h = &(*headers)[i];
    const auto dtype = format::dtype_display(e.dtype);
    if (json) {
      std::printf("%s{\"name\":%s,\"dtype\":\"%s\",\"shape\":%s,\"type\":\"%s\",\"module_index\":%u,"
                  "\"header_offset\":%llu,\"data_offset\":%llu,\"data_length\":%llu}",
                  i ? "," : "", format::json_name(e.path).c_str(), dtype.c_str(), shape_json(e.shape).c_str(),
                  format::tensor_type_name(e.type), h->module_index, static_cast<unsigned long long>(e.header_offset),
                  static_cast<unsigned long long>(e.data_offset), static_cast<unsigned long long>(e.data_length));
    } else {
      std::printf("%-40s %-10s %-18s %-10s module %-4u header @%llu data @%llu +%llu%s\n",
                  format::display_name(e.path).c_str(), dtype.c_str(), shape_json(e.shape).c_str(),
                  format::tensor_type_name(e.type), h->module_index, static_cast<unsigned long long>(e.header_offset),
                  static_cast<unsigned long long>(e.data_offset), static_cast<unsigned long long>(e.data_length),
                  e.is_meta() ? " (meta)" : "");
    }
  }
  if (json) std::printf("]}\n");
  return 0;
}

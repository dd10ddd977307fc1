// tensorizer inspect / hash / verify: read-only views of a model (.tensors, safetensors, or a
// checkpoint sharded over safetensors files).
#include "cli.hpp"
#include "remote_args.hpp"
#include "tensor_walk.hpp"
#include "tz/hash.hpp"
#include "tz/loader.hpp"

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
constexpr const char* hash_help =
    "usage: tensorizer hash [--json] [--no-verify] [--decrypt-key-file F | --decrypt-passphrase-file F]\n                       [remote options] MODEL...\n"
    "  Prints the SHA-256 of each tensor's plaintext data bytes (C order; meta tensors: of the\n"
    "  zeros they load as). Checks every stored CRC32/SHA-256 on the way unless --no-verify.\n";
constexpr const char* verify_help =
    "usage: tensorizer verify [--decrypt-key-file F | --decrypt-passphrase-file F]\n                       [remote options] MODEL...\n"
    "  Checks every stored hash (after decryption); prints a summary; exits 1 on the first mismatch.\n"
    "  safetensors stores no hashes: a sharded checkpoint's index is checked against its shards and\n"
    "  every byte is read.\n"
    "  Encrypted files need a key file or a passphrase file ('-' prompts on the terminal).\n";

std::string shape_json(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// SHA-256 of what a tensor loads as: its data, or zeros for a meta tensor.
sha256_digest plaintext_sha(const format::tensor_entry& e, std::span<const std::byte> data) {
  if (!e.is_meta()) return sha256(data);
  sha256_hasher h;
  std::vector<std::byte> zeros(std::min<std::uint64_t>(e.deserialized_bytes, 1 << 20));
  for (std::uint64_t left = e.deserialized_bytes; left > 0;) {
    const auto n = std::min<std::uint64_t>(left, zeros.size());
    h.update(std::span<const std::byte>(zeros).first(n));
    left -= n;
  }
  return h.finish();
}

// A command's usage text followed by the MODEL and FILE-or-URI options every command shares.
std::string help_of(const char* own) { return std::string(own) + cli::model_help + cli::remote_help; }

// Parses the shared remote options and opens the MODEL inputs as a loader.
result<loader> open_model(scheduler& sched, const cli::args& a) {
  TZ_TRY(remote, cli::remote_options_from(a));
  return cli::open_loader(sched, a.positional, remote);
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
  const auto help = help_of(inspect_help);
  auto a = cli::parse(argc, argv, 2, cli::with_remote_valued(cli::decrypt_options), cli::with_remote_flags({"--json", "--help"}));
  if (!a) return cli::usage_error("inspect", a.error().message, help.c_str());
  if (a->has("--help")) return std::printf("%s", help.c_str()), 0;
  if (a->positional.empty()) return cli::usage_error("inspect", "expected a MODEL", help.c_str());
  tz::scheduler sched;
  auto reader = open_model(sched, *a);
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

int cmd_hash(int argc, char** argv) {
  const auto help = help_of(hash_help);
  auto a = cli::parse(argc, argv, 2, cli::with_remote_valued(cli::decrypt_options), cli::with_remote_flags({"--json", "--no-verify", "--help"}));
  if (!a) return cli::usage_error("hash", a.error().message, help.c_str());
  if (a->has("--help")) return std::printf("%s", help.c_str()), 0;
  if (a->positional.empty()) return cli::usage_error("hash", "expected a MODEL", help.c_str());
  tz::scheduler sched;
  auto reader = open_model(sched, *a);
  if (!reader) return cli::fail("hash", reader.error());
  const bool json = a->has("--json");
  std::string out = json ? "{\"tensors\":[" : "";
  auto decryption = cli::decryption_from(*a);
  if (!decryption) return cli::fail("hash", decryption.error());
  auto r = cli::walk_tensors(sched, *reader, {.verify = !a->has("--no-verify"), .decryption = *decryption},
                             [&](std::size_t i, const format::tensor_entry& e, const format::tensor_header*,
                                 std::span<const std::byte> data) -> result<void> {
                               const auto hex = to_hex(plaintext_sha(e, data));
                               if (json) out += std::string(i ? "," : "") + "{\"name\":" + format::json_name(e.path) +
                                                ",\"sha256\":\"" + hex + "\"}";
                               else out += hex + "  " + format::display_name(e.path) + "\n";
                               return {};
                             });
  if (!r) return cli::fail("hash", r.error());
  if (json) out += "]}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int cmd_verify(int argc, char** argv) {
  const auto help = help_of(verify_help);
  auto a = cli::parse(argc, argv, 2, cli::with_remote_valued(cli::decrypt_options), cli::with_remote_flags({"--help"}));
  if (!a) return cli::usage_error("verify", a.error().message, help.c_str());
  if (a->has("--help")) return std::printf("%s", help.c_str()), 0;
  if (a->positional.empty()) return cli::usage_error("verify", "expected a MODEL", help.c_str());
  tz::scheduler sched;
  auto reader = open_model(sched, *a);
  if (!reader) return cli::fail("verify", reader.error());
  auto decryption = cli::decryption_from(*a);
  if (!decryption) return cli::fail("verify", decryption.error());
  std::uint64_t bytes = 0, hashes = 0;
  auto r = cli::walk_tensors(sched, *reader, {.verify = true, .decryption = *decryption},
                             [&](std::size_t, const format::tensor_entry&, const format::tensor_header* h,
                                 std::span<const std::byte> data) -> result<void> {
                               bytes += data.size();
                               hashes += h ? h->hashes.size() : 0;
                               return {};
                             });
  if (!r) return cli::fail("verify", r.error());
  std::printf("OK: %zu tensors, %llu data bytes, %llu stored hashes verified", reader->index().tensors.size(),
              static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(hashes));
  if (reader->kind() == file_kind::safetensors)
    std::printf(" (safetensors stores none: %s read, %s)", reader->shards().empty() ? "the file" : "every shard",
                reader->shards().empty() ? "its header checked" : "the index checked against the shards");
  std::printf("\n");
  return 0;
}

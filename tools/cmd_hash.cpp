// tensorizer hash: the SHA-256 of every tensor's plaintext, through the load pipeline.
#include "cli.hpp"
#include "remote_args.hpp"
#include "tensor_walk.hpp"
#include "tz/crypto/hash.hpp"

#include <cstdio>
#include <string>

using namespace tz;

namespace {

constexpr const char* hash_help =
    "usage: tensorizer hash [--json] [--no-verify] [--decrypt-key-file F | --decrypt-passphrase-file F]\n                       [remote options] MODEL...\n"
    "  Prints the SHA-256 of each tensor's plaintext data bytes (C order; meta tensors: of the\n"
    "  zeros they load as). Checks every stored CRC32/SHA-256 on the way unless --no-verify.\n";
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

}  // namespace

int cmd_hash(int argc, char** argv) {
  const auto help = cli::help_of(hash_help);
  auto a = cli::parse(argc, argv, 2, cli::with_remote_valued(cli::decrypt_options), cli::with_remote_flags({"--json", "--no-verify", "--help"}));
  if (!a) return cli::usage_error("hash", a.error().message, help.c_str());
  if (a->has("--help")) return std::printf("%s", help.c_str()), 0;
  if (a->positional.empty()) return cli::usage_error("hash", "expected a MODEL", help.c_str());
  tz::scheduler sched;
  auto reader = cli::open_model(sched, *a);
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

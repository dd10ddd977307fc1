// tensorizer verify: checks every stored hash of a model through the load pipeline.
#include "cli.hpp"
#include "remote_args.hpp"
#include "tensor_walk.hpp"

#include <cstdio>
#include <string>

using namespace tz;

namespace {

constexpr const char* verify_help =
    "usage: tensorizer verify [--decrypt-key-file F | --decrypt-passphrase-file F]\n                       [remote options] MODEL...\n"
    "  Checks every stored hash (after decryption); prints a summary; exits 1 on the first mismatch.\n"
    "  safetensors stores no hashes: a sharded checkpoint's index is checked against its shards and\n"
    "  every byte is read.\n"
    "  Encrypted files need a key file or a passphrase file ('-' prompts on the terminal).\n";

}  // namespace

int cmd_verify(int argc, char** argv) {
  const auto help = cli::help_of(verify_help);
  auto a = cli::parse(argc, argv, 2, cli::with_remote_valued(cli::decrypt_options), cli::with_remote_flags({"--help"}));
  if (!a) return cli::usage_error("verify", a.error().message, help.c_str());
  if (a->has("--help")) return std::printf("%s", help.c_str()), 0;
  if (a->positional.empty()) return cli::usage_error("verify", "expected a MODEL", help.c_str());
  tz::scheduler sched;
  auto reader = cli::open_model(sched, *a);
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

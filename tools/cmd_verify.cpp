// tensorizer verify: checks every stored hash of a model through the load pipeline.
#include "cli.hpp"
#include "remote_args.hpp"
#include "signing_args.hpp"
#include "tensor_walk.hpp"

#include <cstdio>
#include <string>
#include <thread>

using namespace tz;

namespace {

constexpr const char* verify_help =
    "usage: tensorizer verify [--decrypt-key-file F | --decrypt-passphrase-file F]\n                       [remote options] MODEL...\n"
    "  Checks every stored hash (after decryption); prints a summary; exits 1 on the first mismatch.\n"
    "  safetensors stores no hashes: a sharded checkpoint's index is checked against its shards and\n"
    "  every byte is read.\n"
    "  Encrypted files need a key file or a passphrase file ('-' prompts on the terminal).\n"
    "  With --signature: checks MODEL (a directory or one file) against its OpenSSF model signature\n"
    "  instead, every file hashed on every core; `load --signature` checks it in the load's pass.\n";

// verify --signature: the model signing check on its own (what `model_signing verify` does).
int verify_signature(const cli::args& a) {
  if (a.positional.size() != 1) return cli::usage_error("verify", "--signature checks one MODEL", verify_help);
  const std::string model = a.positional[0], sig = *a.get("--signature");
  auto who = cli::trust_from(a);
  if (!who) return cli::fail("verify", who.error());
  auto bundle = signing::read_small_file(sig, "signature");
  if (!bundle) return cli::fail("verify", bundle.error());
  auto expected = signing::verify_bundle(*bundle, *who, sig);
  if (!expected) return cli::fail("verify", expected.error());
  auto files = signing::list_model(a.get("--model-root").value_or(model), expected->how, sig);
  if (!files) return cli::fail("verify", files.error());
  auto actual = signing::hash_files(signing::model_name_of(model), *files, expected->how,
                                    std::max(1u, std::thread::hardware_concurrency()));
  if (!actual) return cli::fail("verify", actual.error());
  if (auto same = signing::compare(*expected, *actual); !same) return cli::fail("verify", same.error());
  std::uint64_t bytes = 0;
  for (const auto& f : *files) bytes += f.size_bytes;
  std::printf("OK: signature verified; %zu files, %llu bytes, %zu digests match (%s)\n", files->size(),
              static_cast<unsigned long long>(bytes), actual->digests.size(), expected->how.method.c_str());
  return 0;
}

}  // namespace

int cmd_verify(int argc, char** argv) {
  const auto help = cli::help_of(verify_help);
  auto valued = cli::with_remote_valued(cli::decrypt_options);
  valued.insert(valued.end(), cli::verify_signature_options.begin(), cli::verify_signature_options.end());
  auto a = cli::parse(argc, argv, 2, valued, cli::with_remote_flags({"--help"}));
  if (!a) return cli::usage_error("verify", a.error().message, help.c_str());
  if (a->has("--help")) return std::printf("%s%s", help.c_str(), cli::signature_help), 0;
  if (a->positional.empty()) return cli::usage_error("verify", "expected a MODEL", help.c_str());
  if (a->has("--signature")) return verify_signature(*a);
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

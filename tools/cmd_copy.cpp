// tensorizer copy: reads every tensor of a model and writes a new .tensors file (adding, removing
// or changing encryption on the way).
#include "cli.hpp"
#include "remote_args.hpp"
#include "tensor_walk.hpp"
#include "tz/format/writer.hpp"

#include <cstdio>
#include <cstring>

using namespace tz;

namespace {

constexpr const char* copy_help =
    "usage: tensorizer copy [decrypt options] [encrypt options] [remote options] IN OUT\n"
    "  Reads every tensor of IN (checking its stored hashes) and writes them, in the same order with\n"
    "  the same names, types, module indices, dtypes and shapes, to OUT (atomically: a temporary file\n"
    "  renamed into place). For unencrypted files written by tensorizer 2.11.1 or 2.12.1 (data\n"
    "  version 5 included), OUT is byte-identical.\n"
    "  --decrypt-key-file F | --decrypt-passphrase-file F   open an encrypted IN\n"
    "  --encrypt-key-file F | --encrypt-passphrase-file F   encrypt OUT (tensorizer-compatible)\n"
    "  --kdf-preset min|interactive|moderate|sensitive      Argon2id cost for a passphrase (moderate)\n"
    "  Passphrase files hold the passphrase (one trailing newline is ignored); '-' prompts.\n"
    "  Adding, removing or changing encryption of an existing file is a copy with these options.\n"
    "  IN may be remote; OUT may be s3://bucket/key (uploaded from a temporary file: PutObject, or\n"
    "  multipart aborted on failure) or redis://host:port/prefix (tensorizer's key layout).\n";
result<std::unique_ptr<format::tensorizer_encryptor>> encryptor_from(const cli::args& a) {
  if (auto f = a.get("--encrypt-key-file")) {
    TZ_TRY(key, crypto::secret_key::load_file(*f));
    return std::make_unique<format::tensorizer_encryptor>(format::tensorizer_encryptor::from_key(std::move(key)));
  }
  auto f = a.get("--encrypt-passphrase-file");
  if (!f) return std::unique_ptr<format::tensorizer_encryptor>();
  const std::string preset = a.get("--kdf-preset").value_or("moderate");
  crypto::kdf_preset p = crypto::kdf_moderate;
  if (preset == "min") p = crypto::kdf_min;
  else if (preset == "interactive") p = crypto::kdf_interactive;
  else if (preset == "sensitive") p = crypto::kdf_sensitive;
  else if (preset != "moderate") return make_error(errc::invalid_argument, "unknown --kdf-preset '" + preset + "'");
  TZ_TRY(pass, cli::read_passphrase(*f));
  TZ_TRY(enc, format::tensorizer_encryptor::from_passphrase(
                  pass, crypto::kdf_params{p.opslimit, p.memlimit_bytes, crypto::alg_argon2id13, crypto::random_salt()}));
  return std::make_unique<format::tensorizer_encryptor>(std::move(enc));
}

}  // namespace

int cmd_copy(int argc, char** argv) {
  const std::string help = std::string(copy_help) + cli::remote_help;
  auto valued = cli::with_remote_valued(cli::decrypt_options);
  valued.insert(valued.end(), {"--encrypt-key-file", "--encrypt-passphrase-file", "--kdf-preset"});
  auto a = cli::parse(argc, argv, 2, valued, cli::with_remote_flags({"--help"}));
  if (!a) return cli::usage_error("copy", a.error().message, help.c_str());
  if (a->has("--help")) return std::printf("%s", help.c_str()), 0;
  if (a->positional.size() != 2) return cli::usage_error("copy", "expected IN and OUT", help.c_str());
  auto remote = cli::remote_options_from(*a);
  if (!remote) return cli::fail("copy", remote.error());
  tz::scheduler sched;
  auto reader = cli::open_loader(sched, std::span(a->positional).first(1), *remote);
  if (!reader) return cli::fail("copy", reader.error());
  auto decryption = cli::decryption_from(*a);
  if (!decryption) return cli::fail("copy", decryption.error());
  auto encryptor = encryptor_from(*a);
  if (!encryptor) return cli::fail("copy", encryptor.error());
  auto target = tz::output_target::create(a->positional[1], *remote);
  if (!target) return cli::fail("copy", target.error());
  auto writer = format::tensor_writer::create(target->path(), {.encryptor = encryptor->get()});
  if (!writer) return cli::fail("copy", writer.error());
  auto r = cli::walk_tensors(sched, *reader, {.verify = true, .decryption = *decryption},
                             [&](std::size_t, const format::tensor_entry& e, const format::tensor_header* h,
                                 std::span<const std::byte> data) { return writer->write(cli::as_write(e, h, data)); });
  if (!r) return cli::fail("copy", r.error());
  if (auto c = writer->close(); !c) return cli::fail("copy", c.error());
  if (auto p = target->publish(sched); !p) return cli::fail("copy", p.error());
  return 0;
}

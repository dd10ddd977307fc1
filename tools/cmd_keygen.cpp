// tensorizer keygen: a new random key file (never printed).
#include "cli.hpp"

#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

using namespace tz;

namespace {

constexpr const char* keygen_help =
    "usage: tensorizer keygen OUT\n"
    "  Writes a new random 32-byte encryption key (raw bytes, mode 0600) to OUT. Use it with\n"
    "  --encrypt-key-file / --decrypt-key-file. It is never printed.\n";

}  // namespace


int cmd_keygen(int argc, char** argv) {
  auto a = cli::parse(argc, argv, 2, {}, {"--help"});
  if (!a) return cli::usage_error("keygen", a.error().message, keygen_help);
  if (a->has("--help")) return std::printf("%s", keygen_help), 0;
  if (a->positional.size() != 1) return cli::usage_error("keygen", "expected OUT", keygen_help);
  auto key = crypto::secret_key::random();
  if (!key) return cli::fail("keygen", key.error());
  if (auto r = key->save_file(a->positional[0]); !r) return cli::fail("keygen", r.error());
  std::printf("wrote a new 32-byte key to %s (mode 0600)\n", a->positional[0].c_str());
  return 0;
}

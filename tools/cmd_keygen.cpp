// tensorizer keygen, and reading secrets from files or the terminal (never from argv).
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

namespace tz::cli {

result<crypto::passphrase> read_passphrase(const std::string& path) {
  if (path != "-") return crypto::passphrase::load_file(path);
  const int fd = ::open("/dev/tty", O_RDWR | O_CLOEXEC);
  if (fd < 0) return make_error(errc::invalid_argument, "no terminal to prompt for the passphrase on; use a file");
  termios old{};
  const bool tty = ::tcgetattr(fd, &old) == 0;
  if (tty) {
    termios quiet = old;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    ::tcsetattr(fd, TCSAFLUSH, &quiet);
  }
  static constexpr char prompt[] = "Passphrase: ";
  (void)!::write(fd, prompt, sizeof prompt - 1);
  char buf[1024];
  std::size_t n = 0;
  for (char c; n < sizeof buf && ::read(fd, &c, 1) == 1 && c != '\n';) buf[n++] = c;
  if (tty) ::tcsetattr(fd, TCSAFLUSH, &old);
  (void)!::write(fd, "\n", 1);
  ::close(fd);
  auto pass = crypto::passphrase::from_string(std::string_view(buf, n));
  ::explicit_bzero(buf, sizeof buf);
  return pass;
}

}  // namespace tz::cli

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

// Argument parsing, error printing and reading secrets (files or the terminal, never argv), shared
// by the subcommands.
#include "cli.hpp"
#include "tz/base/unique_fd.hpp"

#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace tz::cli {

std::optional<std::string> args::get(const std::string& name) const {
  auto it = options.find(name);
  if (it == options.end()) return std::nullopt;
  return it->second;
}

result<args> parse(int argc, char** argv, int first, const std::vector<std::string>& valued,
                   const std::vector<std::string>& flags) {
  args a;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg.rfind("--", 0) != 0) {
      a.positional.push_back(arg);
      continue;
    }
    std::string value;
    const auto eq = arg.find('=');
    if (eq != std::string::npos) value = arg.substr(eq + 1), arg = arg.substr(0, eq);
    const bool takes_value = std::find(valued.begin(), valued.end(), arg) != valued.end();
    if (takes_value && eq == std::string::npos) {
      if (i + 1 >= argc) return make_error(errc::invalid_argument, "option " + arg + " needs a value");
      value = argv[++i];
    } else if (!takes_value && std::find(flags.begin(), flags.end(), arg) == flags.end()) {
      return make_error(errc::invalid_argument, "unknown option " + arg);
    }
    a.options[arg] = value;
  }
  return a;
}

int fail(const std::string& cmd, const error& e) {
  std::fprintf(stderr, "tensorizer %s: error (%s): %s\n", cmd.c_str(), errc_name(e.code), e.message.c_str());
  return 1;
}

int usage_error(const std::string& cmd, const std::string& message, const char* help) {
  std::fprintf(stderr, "tensorizer %s: %s\n\n%s", cmd.c_str(), message.c_str(), help);
  return 2;
}

result<std::uint64_t> to_uint(const std::string& option, const std::string& text) {
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size())
    return make_error(errc::invalid_argument, "option " + option + " expects a non-negative integer, got '" + text + "'");
  return v;
}

}  // namespace tz::cli

namespace tz::cli {

result<std::optional<format::decryption>> decryption_from(const args& a) {
  if (auto f = a.get("--decrypt-key-file")) {
    TZ_TRY(key, crypto::secret_key::load_file(*f));
    return std::optional<format::decryption>(format::decryption::from_key(std::move(key)));
  }
  if (auto f = a.get("--decrypt-passphrase-file")) {
    TZ_TRY(pass, read_passphrase(*f));
    return std::optional<format::decryption>(format::decryption::from_passphrase(std::move(pass)));
  }
  return std::optional<format::decryption>();
}

}  // namespace tz::cli

namespace tz::cli {

result<crypto::passphrase> read_passphrase(const std::string& path) {
  if (path != "-") return crypto::passphrase::load_file(path);
  const unique_fd tty_fd(::open("/dev/tty", O_RDWR | O_CLOEXEC));
  const int fd = tty_fd.get();
  if (!tty_fd) return make_error(errc::invalid_argument, "no terminal to prompt for the passphrase on; use a file");
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
  auto pass = crypto::passphrase::from_string(std::string_view(buf, n));
  ::explicit_bzero(buf, sizeof buf);
  return pass;
}

}  // namespace tz::cli

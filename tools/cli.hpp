// Shared pieces of the tensorizer command-line tool: argument parsing and output helpers.
#pragma once

#include "tz/base/error.hpp"
#include "tz/format/encryption.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tz::cli {

// Parsed command line of one subcommand: --flags (with or without a value) and positionals.
struct args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;  // "--readers" -> "4"; a bare flag maps to ""
  bool has(const std::string& name) const { return options.count(name) != 0; }
  std::optional<std::string> get(const std::string& name) const;
};

// Parses argv[first..]; `valued` lists the options that take a value. Unknown options fail.
result<args> parse(int argc, char** argv, int first, const std::vector<std::string>& valued,
                   const std::vector<std::string>& flags);

// Prints "tensorizer <cmd>: <message>" to stderr and returns exit code 1 (2 for usage errors).
int fail(const std::string& cmd, const error& e);
int usage_error(const std::string& cmd, const std::string& message, const char* help);

// Parses a non-negative integer option value.
result<std::uint64_t> to_uint(const std::string& option, const std::string& text);

// The --decrypt-key-file / --decrypt-passphrase-file options ("-" prompts on the terminal);
// nullopt when neither is given. Secrets are never taken from the command line itself.
// Reads a passphrase from a file, or from the terminal without echo when path is "-".
result<crypto::passphrase> read_passphrase(const std::string& path);

inline const std::vector<std::string> decrypt_options{"--decrypt-key-file", "--decrypt-passphrase-file"};
result<std::optional<format::decryption>> decryption_from(const args& a);

}  // namespace tz::cli

// The subcommands; each returns the process exit code.
int cmd_inspect(int argc, char** argv);
int cmd_hash(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_copy(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_keygen(int argc, char** argv);
int cmd_load(int argc, char** argv);
int cmd_sign(int argc, char** argv);

// tensorizer: the command-line tool. Dispatches to one function per subcommand.
#include "cli.hpp"

#include <cstdio>
#include <cstring>

namespace {

struct command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

constexpr command commands[] = {
    {"inspect", cmd_inspect, "print the version, flags and per-tensor layout of a file"},
    {"hash", cmd_hash, "print the SHA-256 of every tensor's data (verifying stored hashes)"},
    {"verify", cmd_verify, "check every stored CRC32 / SHA-256"},
    {"copy", cmd_copy, "read every tensor and write a new file"},
    {"convert", cmd_convert, "convert between safetensors and .tensors (by extension)"},
    {"load", cmd_load, "load every tensor into host memory (or --device cuda:N) and report GB/s"},
    {"synth", cmd_synth, "write a deterministic sample model of a given size"},
    {"keygen", cmd_keygen, "write a new random encryption key file"},
    {"sign", cmd_sign, "sign a model as OpenSSF model signing does (verify/load --signature check it)"},
};

void print_help() {
  std::printf("usage: tensorizer <command> [options] ...\n\ncommands:\n");
  for (const auto& c : commands) std::printf("  %-10s %s\n", c.name, c.summary);
  std::printf("\nRun 'tensorizer <command> --help' for the options of a command.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    print_help();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : commands)
    if (!std::strcmp(argv[1], c.name)) return c.run(argc, argv);
  std::fprintf(stderr, "tensorizer: unknown command '%s'\n\n", argv[1]);
  print_help();
  return 2;
}

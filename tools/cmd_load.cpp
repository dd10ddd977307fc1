// `tensorizer load FILE [--verify] [--direct] [--readers N] [--json]`: load every tensor to host memory.
// Compiled only where the tool links tz::engine and tz::backends (their headers are then visible).
#if __has_include("tz/loader.hpp") && __has_include("tz/file_source.hpp")
#include "tz/file_source.hpp"
#include "tz/loader.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

struct load_args {
  std::string path;
  bool verify = false;
  bool direct = false;
  bool json = false;
  unsigned readers = 0;
  unsigned threads = 0;
};

void print_usage() {
  std::fprintf(stderr,
               "usage: tensorizer load FILE [--verify] [--direct] [--readers N] [--threads N] [--json]\n"
               "  Loads every tensor of a .tensors or safetensors file into host memory and reports\n"
               "  bytes, seconds, GB/s and stage times.\n"
               "  --verify     check each tensor's stored CRC32/SHA-256 (on the workers, during the load)\n"
               "  --direct     O_DIRECT reads (for files not in the page cache)\n"
               "  --readers N  reads in flight (default: 2 per worker thread)\n"
               "  --threads N  worker threads (default: one per core)\n"
               "  --json       one JSON object on stdout instead of text\n");
}

bool parse_args(int argc, char** argv, load_args& a) {
  for (int i = 2; i < argc; ++i) {  // argv[1] is "load"
    std::string s = argv[i];
    auto number = [&](unsigned& out) {
      if (i + 1 >= argc) return false;
      char* end = nullptr;
      unsigned long v = std::strtoul(argv[++i], &end, 10);
      if (*end != '\0' || v == 0 || v > 4096) return false;
      out = static_cast<unsigned>(v);
      return true;
    };
    if (s == "--verify") a.verify = true;
    else if (s == "--direct") a.direct = true;
    else if (s == "--json") a.json = true;
    else if (s == "--readers") { if (!number(a.readers)) return false; }
    else if (s == "--threads") { if (!number(a.threads)) return false; }
    else if (s == "-h" || s == "--help") return false;
    else if (!s.empty() && s[0] != '-' && a.path.empty()) a.path = s;
    else return false;
  }
  return !a.path.empty();
}

// A one-line bar redrawn on stderr; only used when stderr is a terminal.
void draw_progress(const tz::load_progress& p) {
  double frac = p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 1.0;
  int filled = static_cast<int>(frac * 40);
  std::fprintf(stderr, "\r[%-40.*s] %5.1f%%  %zu/%zu tensors", filled, "########################################",
               frac * 100, p.tensors_done, p.tensors_total);
}

void print_report(const load_args& a, const tz::loader& l, const tz::loaded_tensors& r, unsigned threads,
                  unsigned readers) {
  const auto& t = r.timings();
  double seconds = t.open_s + t.total_s;
  double gbps = seconds > 0 ? static_cast<double>(r.bytes()) / seconds / 1e9 : 0;
  const char* kind = l.kind() == tz::file_kind::tensorizer ? "tensorizer" : "safetensors";
  if (a.json) {
    std::printf("{\"file\":\"%s\",\"format\":\"%s\",\"tensors\":%zu,\"bytes\":%llu,\"seconds\":%.6f,"
                "\"gb_per_s\":%.3f,\"verify\":%s,\"direct\":%s,\"threads\":%u,\"readers\":%u,"
                "\"stages\":{\"open_s\":%.6f,\"prepare_s\":%.6f,\"read_s\":%.6f,\"verify_s\":%.6f,"
                "\"total_s\":%.6f}}\n",
                a.path.c_str(), kind, r.size(), static_cast<unsigned long long>(r.bytes()), seconds, gbps,
                a.verify ? "true" : "false", a.direct ? "true" : "false", threads, readers, t.open_s, t.prepare_s,
                t.read_s, t.verify_s, seconds);
    return;
  }
  std::printf("%s (%s): %zu tensors, %llu bytes in %.3f s = %.2f GB/s\n", a.path.c_str(), kind, r.size(),
              static_cast<unsigned long long>(r.bytes()), seconds, gbps);
  std::printf("  open+index %.3f s, prepare %.3f s, read %.3f s, verify %.3f s (summed over workers%s), "
              "total %.3f s\n",
              t.open_s, t.prepare_s, t.read_s, t.verify_s, a.verify ? "" : ", off", seconds);
  std::printf("  %u worker threads, %u readers, %s reads\n", threads, readers, a.direct ? "O_DIRECT" : "buffered");
}

}  // namespace

// Entry point of the `load` subcommand (argv[1] is "load"). Returns the process exit code:
// 0 loaded, 1 load failed (message on stderr), 2 bad usage.
int cmd_load(int argc, char** argv) {
  load_args a;
  if (!parse_args(argc, argv, a)) {
    print_usage();
    return 2;
  }
  try {
    tz::scheduler sched(a.threads);
    auto src = tz::file_source::open(a.path, {a.direct, false});
    if (!src) {
      std::fprintf(stderr, "tensorizer load: %s\n", src.error().message.c_str());
      return 1;
    }
    auto l = tz::loader::open(sched, *src);
    if (!l) {
      std::fprintf(stderr, "tensorizer load: %s\n", l.error().message.c_str());
      return 1;
    }
    tz::load_options o;
    o.verify = a.verify;
    o.readers = a.readers ? a.readers : 2 * sched.thread_count();
    bool tty = !a.json && ::isatty(STDERR_FILENO);
    if (tty) o.on_progress = draw_progress;
    auto r = l->load(sched, {}, o);
    if (tty) std::fputc('\n', stderr);
    if (!r) {
      std::fprintf(stderr, "tensorizer load: %s\n", r.error().message.c_str());
      return 1;
    }
    print_report(a, *l, *r, sched.thread_count(), o.readers);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensorizer load: %s\n", e.what());
    return 1;
  }
}

#endif  // engine headers available

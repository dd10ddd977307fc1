// `tensorizer load FILE|URI`: load every tensor into host memory and report GB/s and stage times.
#include "cli.hpp"
#include "load_report.hpp"
#include "remote_args.hpp"

#include "tz/sources/checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>

using namespace tz;

namespace {

constexpr const char* load_help =
    "usage: tensorizer load [options] MODEL...\n"
    "  Loads every tensor of MODEL (a .tensors or safetensors file or URI, or a sharded checkpoint: see\n"
    "  MODEL below) into host memory and reports bytes, seconds, GB/s and stage times (a progress bar\n"
    "  on a terminal).\n"
    "  --device cuda:N  load straight into GPU memory instead (see `load --device cuda:0 --help`)\n"
    "  --verify         check each tensor's stored CRC32/SHA-256 (on the workers, during the load)\n"
    "  --direct         O_DIRECT reads of a local FILE (for files not in the page cache)\n"
    "  --readers N      reads in flight (default: 2 per worker thread)\n"
    "  --threads N      worker threads (default: one per core)\n"
    "  --json           one JSON object on stdout instead of text\n"
    "  --repeat N       load N times in this process (each load freed before the next) and report the\n"
    "                   median run, with every run's rate (for benchmarks: runs after the first find\n"
    "                   the process's memory and the page cache warm)\n"
    "  --decrypt-key-file F | --decrypt-passphrase-file F   open an encrypted file\n";

struct load_args {
  std::vector<std::string> inputs;
  bool verify = false, direct = false, json = false;
  unsigned readers = 0, threads = 0, repeat = 1;
};

// A one-line bar redrawn on stderr; only used when stderr is a terminal.
void draw_progress(const load_progress& p) {
  double frac = p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 1.0;
  int filled = static_cast<int>(frac * 40);
  std::fprintf(stderr, "\r[%-40.*s] %5.1f%%  %zu/%zu tensors", filled, "########################################",
               frac * 100, p.tensors_done, p.tensors_total);
}

void print_report(const load_args& a, const loader& l, const loaded_tensors& r, const load_timings& timings,
                  unsigned threads, unsigned readers, std::vector<double> runs_gbps) {
  cli::load_report rep;
  rep.file = a.inputs.size() == 1 ? a.inputs[0] : l.source().name();
  rep.cache = cache_status(l);
  rep.safetensors = l.kind() == file_kind::safetensors;
  rep.destination = "host";
  rep.tensors = r.size();
  rep.data_bytes = r.data_bytes();
  rep.timings = timings;
  rep.verify = a.verify;
  rep.direct = a.direct;
  rep.threads = threads;
  rep.readers = readers;
  rep.runs_gbps = std::move(runs_gbps);
  cli::print_load_report(rep, a.json);
}

result<load_args> parse_load(const cli::args& a) {
  load_args out;
  if (a.positional.empty()) return make_error(errc::invalid_argument, "expected a MODEL");
  out.inputs = a.positional;
  out.verify = a.has("--verify"), out.direct = a.has("--direct"), out.json = a.has("--json");
  for (auto [name, target] : {std::pair{"--readers", &out.readers}, std::pair{"--threads", &out.threads},
                              std::pair{"--repeat", &out.repeat}}) {
    if (auto v = a.get(name)) {
      TZ_TRY(n, cli::to_uint(name, *v));
      if (n == 0 || n > 4096) return make_error(errc::invalid_argument, std::string(name) + " must be 1..4096");
      *target = static_cast<unsigned>(n);
    }
  }
  return out;
}

}  // namespace

// Entry point of the `load` subcommand (argv[1] is "load"): 0 loaded, 1 failed, 2 bad usage.
int cmd_load(int argc, char** argv) {
  auto valued = cli::with_remote_valued({"--readers", "--threads", "--device", "--repeat"});
  valued.insert(valued.end(), cli::decrypt_options.begin(), cli::decrypt_options.end());
  auto a = cli::parse(argc, argv, 2, valued, cli::with_remote_flags({"--verify", "--direct", "--json", "--help"}));
  if (!a) return cli::usage_error("load", a.error().message, load_help);
  if (a->has("--help")) return std::printf("%s%s%s%s", load_help, cli::load_rate_help, cli::model_help, cli::remote_help), 0;
  auto args = parse_load(*a);
  if (!args) return cli::usage_error("load", args.error().message, load_help);
  auto remote = cli::remote_options_from(*a);
  if (!remote) return cli::fail("load", remote.error());
  auto decryption = cli::decryption_from(*a);
  if (!decryption) return cli::fail("load", decryption.error());
  try {
    scheduler sched(args->threads);
    auto l = open_checkpoint(sched, args->inputs, {*remote, args->direct});
    if (!l) return cli::fail("load", l.error());
    load_options o;
    o.verify = args->verify;
    o.readers = args->readers ? args->readers : 2 * sched.thread_count();
    o.decryption = std::move(*decryption);
    const bool tty = !args->json && ::isatty(STDERR_FILENO);
    if (tty) o.on_progress = draw_progress;
    // --repeat: each run is freed before the next; the report is the median run's timings.
    std::vector<load_timings> runs;
    std::optional<loaded_tensors> last;
    for (unsigned k = 0; k < args->repeat; ++k) {
      last.reset();
      auto r = l->load(sched, {}, o);
      if (tty) std::fputc('\n', stderr);
      if (!r) return cli::fail("load", r.error());
      runs.push_back(r->timings());
      last.emplace(std::move(*r));
    }
    std::vector<double> rates;
    for (const auto& t : runs)
      rates.push_back(t.total_s > 0 ? static_cast<double>(last->data_bytes()) / t.total_s / 1e9 : 0);
    auto by_time = runs;
    std::sort(by_time.begin(), by_time.end(), [](const auto& a, const auto& b) { return a.total_s < b.total_s; });
    print_report(*args, *l, *last, by_time[(by_time.size() - 1) / 2], sched.thread_count(), o.readers,
                 args->repeat > 1 ? rates : std::vector<double>{});
    return 0;
  } catch (const std::exception& e) {
    return cli::fail("load", make_error(errc::io, e.what()));
  }
}

// `tensorizer load MODEL...`: loads every tensor into host memory or, with --device cuda:N, onto a
// GPU, and reports GB/s and stage times. One command for both sinks: the same options, progress
// bar, --repeat, report and errors; the device adds only the shape of its staging ring.
#include "cli.hpp"
#include "device_sha256.hpp"
#include "load_report.hpp"
#include "remote_args.hpp"
#include "signing_args.hpp"

#include "tz/base/clock.hpp"
#include "tz/engine/device_load.hpp"
#include "tz/engine/load_trace.hpp"
#include "tz/sources/checkpoint.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <optional>
#include <sstream>
#include <tuple>

using namespace tz;

namespace {

constexpr const char* load_help =
    "usage: tensorizer load [options] MODEL...\n"
    "  Loads every tensor of MODEL (a .tensors or safetensors file or URI, or a sharded checkpoint: see\n"
    "  MODEL below) into host memory, or with --device straight into GPU memory, and reports bytes,\n"
    "  seconds, GB/s and stage times (a progress bar on a terminal).\n"
    "  --device cpu|cuda|cuda:N  where the tensors go (default cpu = host memory); a GPU load reads\n"
    "                   through a ring of pinned staging slots and copies on CUDA streams\n"
    "  --only NAME[,NAME...]  load only these tensors (by name)\n"
    "  --verify         check each tensor's stored CRC32/SHA-256 during the load (on the workers; a\n"
    "                   GPU load takes the CRC32s on the device)\n"
    "  --direct         O_DIRECT reads of a local FILE (for files not in the page cache)\n"
    "  --readers N      reads in flight (default: 2 per worker thread; http(s)/s3: 64, to fill a\n"
    "                   link whose responses start late, or 16 when the first answer came within\n"
    "                   10 ms; device: at most 3/4 of the slots)\n"
    "  --threads N      worker threads (default: one per core)\n"
    "  --json           one JSON object on stdout instead of text\n"
    "  --repeat N       load N times in this process (each load freed before the next) and report the\n"
    "                   median run, with every run's rate (runs after the first find the process's\n"
    "                   memory, the GPU's streams and pinned ring, and the page cache warm)\n"
    "  --decrypt-key-file F | --decrypt-passphrase-file F   open an encrypted file\n"
    "  --trace FILE     write the first load's timeline as Chrome trace-event JSON (open it in\n"
    "                   ui.perfetto.dev): per range its read, check and copy, ring waits, setup\n"
    "  With --device only: --slots N (staging slots: 16, 64 when verifying), --slot-mib N (slot\n"
    "  size, 4), --streams N (CUDA streams, 4), --device-sha256 (after the last load, copy every\n"
    "  tensor back from the device and report its SHA-256, as `hash --json` does for the file).\n";

struct load_args {
  std::vector<std::string> inputs;
  std::vector<std::string> only;
  std::string trace;  // --trace FILE
  bool verify = false, direct = false, json = false, device_sha256 = false;
  unsigned readers = 0, threads = 0, repeat = 1;
  std::optional<int> device;  // a GPU; none: host memory
  std::string device_name = "host";
  std::size_t slot_count = 0, slot_mib = device_load_options::default_slot_bytes >> 20;
  unsigned streams = cuda::uploader::default_stream_count;
};

// A one-line bar redrawn on stderr; only used when stderr is a terminal.
void draw_progress(const load_progress& p) {
  double frac = p.bytes_total ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 1.0;
  int filled = static_cast<int>(frac * 40);
  std::fprintf(stderr, "\r[%-40.*s] %5.1f%%  %zu/%zu tensors", filled, "########################################",
               frac * 100, p.tensors_done, p.tensors_total);
}

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string name; std::getline(in, name, ',');)
    if (!name.empty()) out.push_back(name);
  return out;
}

// --device: nothing or "cpu" is host memory, "cuda" / "cuda:N" a GPU.
result<void> parse_device(const cli::args& a, load_args& out) {
  auto v = a.get("--device");
  if (!v || *v == "cpu") {
    for (const char* name : {"--slots", "--slot-mib", "--streams", "--device-sha256"})
      if (a.has(name)) return make_error(errc::invalid_argument, std::string(name) + " applies to --device cuda:N only");
    return {};
  }
  if (v->rfind("cuda", 0) != 0)
    return make_error(errc::invalid_argument, "unknown --device '" + *v + "' (expected cpu, cuda or cuda:N)");
  TZ_TRY(index, cuda::parse_device(*v));
  out.device = index;
  out.device_name = "cuda:" + std::to_string(index);
  return {};
}

result<load_args> parse_load(const cli::args& a) {
  load_args out;
  if (a.positional.empty()) return make_error(errc::invalid_argument, "expected a MODEL");
  out.inputs = a.positional;
  out.verify = a.has("--verify"), out.direct = a.has("--direct"), out.json = a.has("--json");
  out.device_sha256 = a.has("--device-sha256");
  if (auto v = a.get("--only")) out.only = split_names(*v);
  if (auto v = a.get("--trace")) out.trace = *v;
  TZ_CHECK(parse_device(a, out));
  std::size_t streams = out.streams;
  for (auto [name, target] : {std::pair{"--readers", &out.readers}, std::pair{"--threads", &out.threads},
                              std::pair{"--repeat", &out.repeat}}) {
    if (auto v = a.get(name)) {
      TZ_TRY(n, cli::to_uint(name, *v));
      if (n == 0 || n > 4096) return make_error(errc::invalid_argument, std::string(name) + " must be 1..4096");
      *target = static_cast<unsigned>(n);
    }
  }
  for (auto [name, target, high] : {std::tuple{"--slots", &out.slot_count, 65536ull},
                                    std::tuple{"--slot-mib", &out.slot_mib, 1024ull},
                                    std::tuple{"--streams", &streams, 64ull}}) {
    if (auto v = a.get(name)) {
      TZ_TRY(n, cli::to_uint(name, *v));
      if (n < 1 || n > high) return make_error(errc::invalid_argument, std::string(name) + " must be 1.." + std::to_string(high));
      *target = static_cast<std::size_t>(n);
    }
  }
  out.streams = static_cast<unsigned>(streams);
  return out;
}

result<std::vector<std::size_t>> select_names(const loader& l, const std::vector<std::string>& names) {
  std::vector<std::size_t> which;
  for (const auto& name : names) {
    auto i = l.find(name);
    if (!i) return make_error(errc::not_found, l.source().name() + ": no tensor named '" + name + "'");
    which.push_back(*i);
  }
  return which;
}

// One load's outcome, host or device, as the report needs it.
struct one_run {
  load_timings timings;
  std::size_t tensors = 0;
  std::uint64_t data_bytes = 0, ring_bytes = 0, pinned_max_bytes = 0;
  unsigned readers = 0;  // reads in flight (the engine's choice for --readers 0)
  std::vector<cli::tensor_sha256> device_sha256;  // --device-sha256: each tensor read back
};

// Loads `which` of `l` once to the sink the arguments name; the loaded tensors are freed on return.
result<one_run> load_once(scheduler& sched, loader& l, const load_args& a, const std::vector<std::size_t>& which,
                          device_context* ctx, const load_common_options& common) {
  if (ctx == nullptr) {
    load_options o;
    static_cast<load_common_options&>(o) = common;
    TZ_TRY(r, l.load(sched, which, o));
    return one_run{r.timings(), r.size(), r.data_bytes(), 0, 0, r.readers(), {}};
  }
  device_load_options o;
  static_cast<load_common_options&>(o) = common;
  o.slot_count = a.slot_count;
  o.slot_bytes = a.slot_mib << 20;
  TZ_TRY(r, load_to_device(sched, *ctx, l, which, o));
  one_run out{r.timings(), r.size(), r.data_bytes(), r.ring_bytes(), r.pinned_bytes_max(), r.readers(), {}};
  if (a.device_sha256) {  // outside the timed load
    TZ_TRY(digests, cli::device_sha256(r));
    out.device_sha256 = std::move(digests);
  }
  return out;
}

// The command's set-up before its first load, wall time: all of it, and of that the GPU's context.
struct setup_times {
  double setup_s = 0, context_s = 0;
};

void print_report(const load_args& a, const loader& l, std::vector<one_run> runs, unsigned threads,
                  setup_times setup) {
  auto digests = std::move(runs.back().device_sha256);
  std::vector<double> rates;
  for (const auto& r : runs)
    rates.push_back(r.timings.total_s > 0 ? static_cast<double>(r.data_bytes) / r.timings.total_s / 1e9 : 0);
  std::sort(runs.begin(), runs.end(), [](const auto& x, const auto& y) { return x.timings.total_s < y.timings.total_s; });
  const one_run& median = runs[(runs.size() - 1) / 2];
  cli::load_report rep;
  rep.file = a.inputs.size() == 1 ? a.inputs[0] : l.source().name();
  rep.cache = cache_status(l);
  rep.safetensors = l.kind() == file_kind::safetensors;
  rep.destination = a.device_name;
  rep.tensors = median.tensors;
  rep.data_bytes = median.data_bytes;
  rep.timings = median.timings;
  rep.verify = a.verify;
  rep.direct = a.direct;
  rep.threads = threads;
  rep.readers = median.readers;
  rep.ring_bytes = median.ring_bytes;
  // The bound a user checks holds for every load, so the report gives the most any run held.
  for (const auto& r : runs) rep.pinned_max_bytes = std::max(rep.pinned_max_bytes, r.pinned_max_bytes);
  if (a.repeat > 1) rep.runs_gbps = std::move(rates);
  rep.setup_s = setup.setup_s;
  rep.context_s = setup.context_s;
  rep.device_sha256 = std::move(digests);
  cli::print_load_report(rep, a.json);
}

// The GPU's context as start_device found it, and how long that took.
struct started_context {
  result<device_context*> ctx;
  double seconds = 0;
};

// The GPU's context (the process's shared one, as every front end uses), made beside the open
// (both stay outside the rate): streams, completion threads and the pinned ring are ready when
// the first load starts.
std::future<started_context> start_device(const load_args& a, bool verify) {
  return std::async(std::launch::async, [device = *a.device, streams = static_cast<int>(a.streams), a, verify] {
    const auto t0 = std::chrono::steady_clock::now();
    auto ctx = device_context::shared(device, streams);
    device_load_options shape;
    shape.verify = verify;
    shape.slot_count = a.slot_count;
    if (ctx) static_cast<void>((*ctx)->reserve_ring(shape.slots(), a.slot_mib << 20));  // a failure recurs in the load
    return started_context{std::move(ctx), seconds_since(t0)};
  });
}

int run_load(const load_args& a, const remote_options& remote, load_common_options common,
             const cli::args* signature) {
  const auto t0 = std::chrono::steady_clock::now();
  setup_times setup;
  scheduler sched(a.threads);
  std::future<started_context> pending;
  if (a.device) pending = start_device(a, common.verify);
  auto l = open_checkpoint(sched, a.inputs, {remote, a.direct});
  device_context* ctx = nullptr;
  if (a.device) {
    auto started = pending.get();
    if (!started.ctx) return cli::fail("load", started.ctx.error());
    ctx = *started.ctx;
    setup.context_s = started.seconds;
  }
  if (!l) return cli::fail("load", l.error());
  std::unique_ptr<signing::signed_load> signed_model;
  if (signature) {
    auto s = cli::signed_load_from(*signature, *l, a.inputs[0]);
    if (!s) return cli::fail("load", s.error());
    signed_model = std::move(*s);
  }
  auto which = select_names(*l, a.only);
  if (!which) return cli::fail("load", which.error());
  const bool tty = !a.json && ::isatty(STDERR_FILENO);
  if (tty) common.on_progress = draw_progress;
  setup.setup_s = seconds_since(t0);
  std::vector<one_run> runs;
  for (unsigned k = 0; k < a.repeat; ++k) {
    auto options = common;
    if (k == 0 && !a.trace.empty()) options.trace = std::make_shared<load_trace>();
    if (k == 0 && signed_model) options.observe = signed_model->observer();  // the first load checks it
    auto r = load_once(sched, *l, a, *which, ctx, options);
    if (tty) std::fputc('\n', stderr);
    if (!r) return cli::fail("load", r.error());
    if (k == 0 && signed_model) {
      if (auto same = signed_model->finish(); !same) return cli::fail("load", same.error());
    }
    if (options.trace) {
      if (auto w = options.trace->write(a.trace); !w) return cli::fail("load", w.error());
    }
    runs.push_back(*r);
  }
  print_report(a, *l, std::move(runs), sched.thread_count(), setup);
  if (signed_model && !a.json) std::printf("  signature: every file of the model matches it (checked in the first load)\n");
  return 0;
}

}  // namespace

// Entry point of the `load` subcommand (argv[1] is "load"): 0 loaded, 1 failed (no GPU:
// errc::no_device, reported as such), 2 bad usage.
int cmd_load(int argc, char** argv) {
  auto valued = cli::with_remote_valued(
      {"--readers", "--threads", "--device", "--repeat", "--only", "--slots", "--slot-mib", "--streams", "--trace"});
  valued.insert(valued.end(), cli::decrypt_options.begin(), cli::decrypt_options.end());
  valued.insert(valued.end(), cli::verify_signature_options.begin(), cli::verify_signature_options.end());
  auto a = cli::parse(argc, argv, 2, valued, cli::with_remote_flags({"--verify", "--direct", "--json", "--help", "--device-sha256"}));
  if (!a) return cli::usage_error("load", a.error().message, load_help);
  if (a->has("--help"))
    return std::printf("%s%s%s%s%s", load_help, cli::load_rate_help, cli::model_help, cli::remote_help, cli::signature_help), 0;
  auto args = parse_load(*a);
  if (!args) return cli::usage_error("load", args.error().message, load_help);
  auto remote = cli::remote_options_from(*a);
  if (!remote) return cli::fail("load", remote.error());
  auto decryption = cli::decryption_from(*a);
  if (!decryption) return cli::fail("load", decryption.error());
  load_common_options common;
  common.verify = args->verify;
  common.readers = args->readers;
  common.decryption = std::move(*decryption);
  try {
    return run_load(*args, *remote, std::move(common), a->has("--signature") ? &*a : nullptr);
  } catch (const std::exception& e) {
    return cli::fail("load", make_error(errc::io, e.what()));
  }
}

// tensorizer load --device cuda:N: loads a file or URI straight into GPU memory and reports the
// per-stage timings. The `load` subcommand dispatches here when --device names a GPU.
#include "cli.hpp"
#include "device_sha256.hpp"
#include "load_report.hpp"
#include "remote_args.hpp"

#include "tz/engine/device_load.hpp"
#include "tz/sources/checkpoint.hpp"

#include <cstdio>
#include <sstream>

using namespace tz;

namespace {

constexpr const char* load_device_help =
    "usage: tensorizer load --device cuda:N [options] MODEL...\n"
    "  Loads the tensors of FILE or URI (.tensors or safetensors; http(s)://, s3://, redis://) into the\n"
    "  memory of GPU N through a ring of pinned staging slots, and prints per-stage timings.\n"
    "  --only NAME[,NAME...]    load only these tensors (by name)\n"
    "  --verify                 check the stored CRC32 / SHA-256 of every tensor before it is uploaded\n"
    "  --direct                 read a local FILE with O_DIRECT (cold files)\n"
    "  --slots N                staging slots (16)          --slot-mib N   slot size in MiB (4)\n"
    "  --readers N              reads in flight (automatic) --threads N    worker threads (one per core)\n"
    "  --streams N              CUDA streams (4)\n"
    "  --json                   one JSON object on stdout instead of text\n"
    "  --device-sha256          then copy every tensor back from the device and report its SHA-256\n"
    "                           (as `tensorizer hash` reports the model's: compare the two)\n"
    "  --decrypt-key-file F | --decrypt-passphrase-file F   open an encrypted FILE\n";

struct load_device_args {
  std::vector<std::string> inputs;
  std::vector<std::string> only;
  bool direct = false;
  bool json = false;
  bool device_sha256 = false;
  unsigned threads = 0;
  int streams = cuda::uploader::default_stream_count;
  device_load_options options;
};

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string name; std::getline(in, name, ',');) {
    if (!name.empty()) out.push_back(name);
  }
  return out;
}

result<load_device_args> read_args(const cli::args& a) {
  load_device_args out;
  if (a.positional.empty()) return make_error(errc::invalid_argument, "expected a MODEL");
  out.inputs = a.positional;
  out.direct = a.has("--direct");
  out.json = a.has("--json");
  out.device_sha256 = a.has("--device-sha256");
  out.options.verify = a.has("--verify");
  if (auto v = a.get("--only")) out.only = split_names(*v);
  auto number = [&](const char* name, auto& field) -> result<void> {
    auto v = a.get(name);
    if (!v) return {};
    TZ_TRY(n, cli::to_uint(name, *v));
    field = static_cast<std::remove_reference_t<decltype(field)>>(n);
    return {};
  };
  std::size_t slot_mib = out.options.slot_bytes >> 20;
  TZ_CHECK(number("--slots", out.options.slot_count));
  TZ_CHECK(number("--slot-mib", slot_mib));
  TZ_CHECK(number("--readers", out.options.readers));
  TZ_CHECK(number("--threads", out.threads));
  TZ_CHECK(number("--streams", out.streams));
  out.options.slot_bytes = slot_mib << 20;
  TZ_TRY(decryption, cli::decryption_from(a));
  out.options.decryption = std::move(decryption);
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

void print_report(const load_device_args& a, const loader& l, const device_tensors& t, const std::string& device,
                  unsigned threads, std::vector<cli::tensor_sha256> digests) {
  cli::load_report rep;
  rep.file = a.inputs.size() == 1 ? a.inputs[0] : l.source().name();
  rep.cache = cache_status(l);
  rep.safetensors = l.kind() == file_kind::safetensors;
  rep.destination = device;
  rep.tensors = t.size();
  rep.data_bytes = t.data_bytes();
  rep.timings = t.timings();
  rep.verify = a.options.verify;
  rep.direct = a.direct;
  rep.threads = threads;
  rep.readers = a.options.readers;  // 0: automatic
  rep.ring_bytes = t.ring_bytes();
  rep.pinned_max_bytes = t.pinned_bytes_max();
  rep.device_sha256 = std::move(digests);
  cli::print_load_report(rep, a.json);
}

}  // namespace

// argv is the whole command line of `tensorizer load ...` (argv[1] == "load"); `device` is the
// --device value the caller already read ("cuda" or "cuda:N"). Returns the process exit code:
// 0 loaded, 1 a failure (no GPU: errc::no_device, reported as such), 2 a usage error.
int cmd_load_device(int argc, char** argv, const std::string& device) {
  auto a = cli::parse(argc, argv, 2,
                      cli::with_remote_valued({"--device", "--only", "--slots", "--slot-mib", "--readers", "--threads",
                                               "--streams", "--decrypt-key-file", "--decrypt-passphrase-file"}),
                      cli::with_remote_flags({"--help", "--verify", "--direct", "--json", "--device-sha256"}));
  if (!a) return cli::usage_error("load", a.error().message, load_device_help);
  if (a->has("--help")) {
    std::fputs(load_device_help, stdout);
    std::fputs(cli::load_rate_help, stdout);
    std::fputs(cli::model_help, stdout);
    std::fputs(cli::remote_help, stdout);
    return 0;
  }
  auto remote = cli::remote_options_from(*a);
  if (!remote) return cli::usage_error("load", remote.error().message, load_device_help);
  auto args = read_args(*a);
  if (!args) return cli::usage_error("load", args.error().message, load_device_help);
  auto index = cuda::parse_device(device);
  if (!index) return cli::usage_error("load", index.error().message, load_device_help);
  auto up = cuda::uploader::create(*index, args->streams);
  if (!up) return cli::fail("load", up.error());
  scheduler sched(args->threads);
  auto opened = open_checkpoint(sched, args->inputs, {*remote, args->direct});
  if (!opened) return cli::fail("load", opened.error());
  auto which = select_names(*opened, args->only);
  if (!which) return cli::fail("load", which.error());
  auto loaded = load_to_device(sched, *up, *opened, opened->shared_source(), std::move(*which), std::move(args->options));
  if (!loaded) return cli::fail("load", loaded.error());
  std::vector<cli::tensor_sha256> digests;
  if (args->device_sha256) {
    auto d = cli::device_sha256(*loaded);
    if (!d) return cli::fail("load", d.error());
    digests = std::move(*d);
  }
  print_report(*args, *opened, *loaded, device, sched.thread_count(), std::move(digests));
  return 0;
}

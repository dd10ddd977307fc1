// Question: what is the pinned host->device copy bandwidth limit, and how many streams and what
// chunk size reach it? Pinned H2D through tz::cuda::uploader with 1/2/4/8 streams and 8..64 MiB
// chunks, against pageable H2D measured in the same run. Exits 77 without a GPU.
#include "tz/cuda/cuda.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace tz::cuda;
constexpr std::size_t mib = std::size_t{1} << 20;

struct options {
  std::size_t total_bytes = 4096 * mib;    // bytes moved per run
  std::size_t buffer_bytes = 1024 * mib;   // host and device buffers the chunks cycle over
  int runs = 5;
  int device = 0;
  std::vector<int> stream_counts = {1, 2, 4, 8};
  std::vector<std::size_t> chunk_sizes = {8 * mib, 16 * mib, 32 * mib, 64 * mib};
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--smoke") {  // CI: seconds, not minutes, so the benchmark cannot rot
      o.total_bytes = 64 * mib;
      o.buffer_bytes = 32 * mib;
      o.runs = 1;
      o.stream_counts = {1, 2};
      o.chunk_sizes = {8 * mib};
    } else if (arg == "--device" && i + 1 < argc) {
      o.device = tz::unwrap(parse_device(argv[++i]));
    } else if (arg == "--total-mib" && i + 1 < argc) {
      o.total_bytes = std::strtoull(argv[++i], nullptr, 10) * mib;
    } else if (arg == "--runs" && i + 1 < argc) {
      o.runs = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: cuda_bench [--smoke] [--device cuda:N] [--total-mib N] [--runs N]\n");
      std::exit(2);
    }
  }
  return o;
}

// Moves `total_bytes` from `host` to `device` in `chunk_bytes` pieces cycling over both buffers,
// all issued at once and then synchronized: the steady state of a busy loader. Returns seconds.
double time_one_run(uploader& up, std::span<const std::byte> host, device_buffer& device, std::size_t chunk_bytes,
                    std::size_t total_bytes) {
  std::vector<upload_ticket> tickets;
  tickets.reserve(total_bytes / chunk_bytes + 1);
  const auto start = std::chrono::steady_clock::now();
  std::size_t offset = 0;
  for (std::size_t moved = 0; moved < total_bytes; moved += chunk_bytes) {
    if (offset + chunk_bytes > host.size()) offset = 0;
    tickets.push_back(tz::unwrap(up.upload(host.subspan(offset, chunk_bytes), device, offset)));
    offset += chunk_bytes;
  }
  tz::unwrap(up.synchronize());
  const auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(stop - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Runs one configuration `runs` times after a warm-up and prints the median GB/s (1e9 bytes/s).
double measure(const char* label, const options& o, std::span<const std::byte> host, device_buffer& device,
               int stream_count, std::size_t chunk_bytes) {
  auto up = tz::unwrap(uploader::create(o.device, stream_count));
  const std::size_t total = o.total_bytes / chunk_bytes * chunk_bytes;
  time_one_run(up, host, device, chunk_bytes, std::min(total, host.size()));  // warm-up
  std::vector<double> gbps;
  for (int r = 0; r < o.runs; ++r) gbps.push_back(total / time_one_run(up, host, device, chunk_bytes, total) / 1e9);
  const double m = median(gbps);
  std::printf("%-9s streams=%d chunk=%3zu MiB total=%5zu MiB: median %6.2f GB/s  (min %.2f, max %.2f, %d runs)\n",
              label, stream_count, chunk_bytes / mib, total / mib, m, *std::min_element(gbps.begin(), gbps.end()),
              *std::max_element(gbps.begin(), gbps.end()), o.runs);
  std::fflush(stdout);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  if (!available()) {
    std::printf("cuda_bench: no CUDA device (built_with_cuda=%d): skipped\n", built_with_cuda() ? 1 : 0);
    return 77;
  }
  const device_info info = tz::unwrap(describe_device(o.device));
  std::printf("cuda_bench: %s (cuda:%d), %zu MiB free; buffers %zu MiB, %zu MiB per run\n", info.name.c_str(),
              o.device, info.free_bytes / mib, o.buffer_bytes / mib, o.total_bytes / mib);

  pinned_buffer pinned = tz::unwrap(alloc_pinned(o.buffer_bytes));
  std::memset(pinned.data(), 0x5a, pinned.size_bytes());
  std::vector<std::byte> pageable(o.buffer_bytes, std::byte{0x5a});  // touched: no page faults timed
  device_buffer device = tz::unwrap(alloc_device(o.device, o.buffer_bytes));

  // Reference in the same run: ordinary (pageable) memory, which CUDA stages through its own
  // pinned bounce buffers.
  double pageable_best = 0;
  for (int streams : {1, 4}) {
    pageable_best = std::max(pageable_best, measure("pageable", o, pageable, device, streams, o.chunk_sizes.back()));
  }
  double best = 0;
  int best_streams = 0;
  std::size_t best_chunk = 0;
  for (int streams : o.stream_counts) {
    for (std::size_t chunk : o.chunk_sizes) {
      const double gbps = measure("pinned", o, pinned.bytes(), device, streams, chunk);
      if (gbps > best) best = gbps, best_streams = streams, best_chunk = chunk;
    }
  }
  std::printf("best pinned: %.2f GB/s (streams=%d, chunk=%zu MiB) = %.2fx best pageable %.2f GB/s\n", best,
              best_streams, best_chunk / mib, pageable_best > 0 ? best / pageable_best : 0.0, pageable_best);
  return 0;
}

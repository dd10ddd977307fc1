// Question: what is the 1- and N-thread secretbox_open throughput limit of this machine?
//
// Seals a buffer (default 512 MiB) in 2 MiB chunks exactly as tensorizer does, then opens every
// chunk in place with 1 thread and with N = hardware_concurrency threads (workers take the next chunk
// from a shared counter, as the engine's decrypt workers would). Each configuration runs 5 times;
// the buffer is re-sealed (untimed) between runs. Prints the median GB/s of open, and, as the
// same-run reference, seal and a plain memcpy of the same buffer (the memory-bandwidth ceiling).
//
// Usage: crypto_bench [--smoke] [--threads=N] [size_mib]
//   --smoke: 8 MiB, 1 run, for CI so it cannot rot; --threads=N: the N of "N threads" (default:
//   hardware_concurrency), e.g. to measure 2 threads on a bigger machine.
#include "tz/crypto/sodium.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace crypto = tz::crypto;

namespace {

struct config {
  std::uint64_t size_bytes = std::uint64_t{512} << 20;
  int runs = 5;
  unsigned threads = 0;  // 0: hardware_concurrency
  bool smoke = false;
};

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Runs fn(chunk_index) for every chunk on `threads` threads; returns false if any call did.
template <class Fn>
bool for_each_chunk(std::uint64_t chunk_count, unsigned threads, Fn fn) {
  std::atomic<std::uint64_t> next{0};
  std::atomic<bool> ok{true};
  auto worker = [&] {
    for (std::uint64_t i = next.fetch_add(1); i < chunk_count; i = next.fetch_add(1)) {
      if (!fn(i)) ok = false;
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  return ok;
}

struct sealed_buffer {
  std::vector<std::byte> data;
  crypto::chunk_layout layout;
  std::vector<crypto::mac> macs;
};

void seal_all(sealed_buffer& buf, const crypto::secret_key& key, const crypto::nonce& initial, unsigned threads) {
  for_each_chunk(buf.layout.count(), threads, [&](std::uint64_t i) {
    const auto range = buf.layout.range(i);
    auto slice = std::span(buf.data).subspan(range.offset_bytes, range.size_bytes);
    return static_cast<bool>(crypto::seal_chunks(slice, buf.layout, {i, i + 1}, key, initial, buf.macs));
  });
}

bool open_all(sealed_buffer& buf, const crypto::secret_key& key, const crypto::nonce& initial, unsigned threads) {
  return for_each_chunk(buf.layout.count(), threads, [&](std::uint64_t i) {
    const auto range = buf.layout.range(i);
    auto slice = std::span(buf.data).subspan(range.offset_bytes, range.size_bytes);
    return static_cast<bool>(crypto::open_chunks(slice, buf.layout, {i, i + 1}, key, initial, buf.macs));
  });
}

double gb_per_s(std::uint64_t bytes, double seconds) { return static_cast<double>(bytes) / seconds / 1e9; }

// Median GB/s of open (and of seal, timed on the re-seal) with `threads` threads.
bool measure(sealed_buffer& buf, const crypto::secret_key& key, const crypto::nonce& initial, unsigned threads,
             const config& cfg) {
  std::vector<double> open_gbps, seal_gbps;
  for (int run = 0; run < cfg.runs; ++run) {
    auto start = clock_type::now();
    if (!open_all(buf, key, initial, threads)) {
      std::fprintf(stderr, "crypto_bench: a chunk failed to open (threads=%u run=%d)\n", threads, run);
      return false;
    }
    open_gbps.push_back(gb_per_s(cfg.size_bytes, seconds_since(start)));
    start = clock_type::now();
    seal_all(buf, key, initial, threads);
    seal_gbps.push_back(gb_per_s(cfg.size_bytes, seconds_since(start)));
  }
  std::printf("threads=%-3u secretbox_open %7.3f GB/s   secretbox_seal %7.3f GB/s   (median of %d)\n", threads,
              median(open_gbps), median(seal_gbps), cfg.runs);
  return true;
}

double memcpy_gbps(const std::vector<std::byte>& source, int runs) {
  std::vector<std::byte> target(source.size());
  std::vector<double> samples;
  for (int run = 0; run < runs; ++run) {
    const auto start = clock_type::now();
    std::memcpy(target.data(), source.data(), source.size());
    samples.push_back(gb_per_s(source.size(), seconds_since(start)));
  }
  return median(samples);
}

config parse_args(int argc, char** argv) {
  config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--smoke") {
      cfg.smoke = true;
      cfg.size_bytes = std::uint64_t{8} << 20;
      cfg.runs = 1;
    } else if (arg.rfind("--threads=", 0) == 0) {
      cfg.threads = static_cast<unsigned>(std::strtoul(arg.c_str() + 10, nullptr, 10));
    } else {
      cfg.size_bytes = std::strtoull(arg.c_str(), nullptr, 10) << 20;
    }
  }
  if (cfg.size_bytes == 0) cfg.size_bytes = std::uint64_t{1} << 20;
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  const config cfg = parse_args(argc, argv);
  auto key = crypto::secret_key::random();
  if (!key) {
    std::fprintf(stderr, "crypto_bench: %s\n", key.error().message.c_str());
    return 1;
  }
  const auto initial = crypto::random_nonce();
  const unsigned hw_threads = std::max(1U, std::thread::hardware_concurrency());
  const unsigned threads = cfg.threads > 0 ? cfg.threads : hw_threads;
  sealed_buffer buf;
  buf.data.resize(cfg.size_bytes);
  for (std::size_t i = 0; i < buf.data.size(); i += 4096) buf.data[i] = static_cast<std::byte>(i >> 12);
  buf.layout = crypto::chunk_layout{cfg.size_bytes};
  buf.macs.resize(buf.layout.count());

  std::printf("crypto_bench: buffer %llu MiB in %llu chunks of %llu bytes, hardware threads %u, N = %u%s\n",
              static_cast<unsigned long long>(cfg.size_bytes >> 20),
              static_cast<unsigned long long>(buf.layout.count()),
              static_cast<unsigned long long>(buf.layout.chunk_size_bytes), hw_threads, threads,
              cfg.smoke ? " (smoke)" : "");
  std::printf("reference   memcpy         %7.3f GB/s   (1 thread, median of %d)\n", memcpy_gbps(buf.data, cfg.runs),
              cfg.runs);
  seal_all(buf, *key, initial, threads);
  if (!measure(buf, *key, initial, 1, cfg)) return 1;
  if (threads > 1 && !measure(buf, *key, initial, threads, cfg)) return 1;
  return 0;
}

// Question: which CRC-32 (zlib polynomial) and SHA-256 library is fastest on one core here, and what
// do crc32_combine and a per-tensor SHA-256 object cost?
//
// Hashes, on one thread, a buffer that stays in cache (256 KiB, hashed repeatedly) and a large one
// (default 1024 MiB, once per run) with every implementation built in: zlib crc32_z, libdeflate,
// ISA-L crc32_gzip_refl; OpenSSL EVP (SHA-NI where the CPU has it), libsodium; and tz::crc32_update /
// tz::sha256_hasher, what crypto/ uses. Prints median GB/s of several runs with a plain memcpy of the
// same buffer as the same-run reference, then the ns per crc32_combine (the cost of hashing a tensor
// in pieces on several threads) and per SHA-256 object made, fed 4 KiB and finished (the per-tensor
// cost). Every implementation's value is checked against zlib's / OpenSSL's; a mismatch exits 1.
//
// Times are the bench thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so that other processes on a
// shared machine slow the wall clock, not the figures; the last line says what share of the wall
// time the thread ran (near 100% on an idle machine, where both clocks agree).
//
// Usage: hash_bench [--smoke] [--runs N] [size_mib]
//   --smoke: 4 MiB large buffer, 1 run, for CI so it cannot rot.
#include "tz/crypto/hash.hpp"

#include <openssl/evp.h>
#include <sodium.h>
#include <zlib.h>
#ifdef TZ_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif
#ifdef TZ_HAVE_ISAL
#include <isa-l/crc.h>
#endif

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using bytes_view = std::span<const std::byte>;

struct config {
  std::size_t large_bytes = std::size_t{1024} << 20;
  std::size_t cache_bytes = std::size_t{256} << 10;
  std::size_t cache_total = std::size_t{512} << 20;  // bytes hashed per in-cache run
  int runs = 5;
  bool smoke = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// CPU seconds this thread has run.
double cpu_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double seconds_since(double start) { return cpu_now() - start; }

// Median GB/s of `runs` runs of fn(), which hashes `bytes` bytes.
template <class Fn>
double gbps(int runs, std::size_t bytes, Fn fn) {
  std::vector<double> samples;
  for (int r = 0; r < runs; ++r) {
    const double start = cpu_now();
    fn();
    samples.push_back(static_cast<double>(bytes) / seconds_since(start) / 1e9);
  }
  return median(samples);
}

// A CRC-32 continued from `crc` over `bytes` (zlib's chaining convention: start from 0).
struct crc_impl {
  const char* name;
  std::uint32_t (*update)(std::uint32_t crc, bytes_view bytes);
};

std::uint32_t zlib_crc(std::uint32_t crc, bytes_view b) {
  return static_cast<std::uint32_t>(::crc32_z(crc, reinterpret_cast<const Bytef*>(b.data()), b.size()));
}

const crc_impl crc_impls[] = {
    {"zlib crc32_z", zlib_crc},
#ifdef TZ_HAVE_LIBDEFLATE
    {"libdeflate_crc32", [](std::uint32_t c, bytes_view b) { return libdeflate_crc32(c, b.data(), b.size()); }},
#endif
#ifdef TZ_HAVE_ISAL
    {"isa-l crc32_gzip_refl",
     [](std::uint32_t c, bytes_view b) {
       return crc32_gzip_refl(c, reinterpret_cast<const unsigned char*>(b.data()), b.size());
     }},
#endif
    {"tz::crc32_update (crypto/)", [](std::uint32_t c, bytes_view b) { return tz::crc32_update(c, b); }},
};

// SHA-256 of `bytes`, made and fed the way a per-tensor verifier would.
struct sha_impl {
  const char* name;
  tz::sha256_digest (*digest)(bytes_view bytes);
};

tz::sha256_digest openssl_sha(bytes_view b) {
  tz::sha256_digest out{};
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx, b.data(), b.size());
  EVP_DigestFinal_ex(ctx, out.data(), nullptr);
  EVP_MD_CTX_free(ctx);
  return out;
}

tz::sha256_digest sodium_sha(bytes_view b) {
  tz::sha256_digest out{};
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  crypto_hash_sha256_update(&st, reinterpret_cast<const unsigned char*>(b.data()), b.size());
  crypto_hash_sha256_final(&st, out.data());
  return out;
}

tz::sha256_digest tz_sha(bytes_view b) {
  tz::sha256_hasher h;
  h.update(b);
  return h.finish();
}

const sha_impl sha_impls[] = {
    {"openssl EVP sha256 (implicit fetch)", openssl_sha},
    {"libsodium crypto_hash_sha256", sodium_sha},
    {"tz::sha256_hasher (crypto/)", tz_sha},
};

std::vector<std::byte> random_bytes(std::size_t n) {
  std::vector<std::byte> v(n);
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (std::size_t i = 0; i < n; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(v.data() + i, &x, std::min<std::size_t>(8, n - i));
  }
  return v;
}

// The in-cache run: `buf` hashed cache_total / buf.size() times, the CRC chained, SHA restarted.
std::size_t cache_repeats(const config& cfg) { return std::max<std::size_t>(1, cfg.cache_total / cfg.cache_bytes); }

void print_row(const char* name, double cache_gbps, double large_gbps) {
  std::printf("  %-38s %8.2f GB/s %8.2f GB/s\n", name, cache_gbps, large_gbps);
}

bool run_crc(const config& cfg, bytes_view cache_buf, bytes_view large_buf) {
  const std::uint32_t want = zlib_crc(0, large_buf), want_cache = zlib_crc(0, cache_buf);
  bool ok = true;
  for (const auto& impl : crc_impls) {
    if (impl.update(0, large_buf) != want || impl.update(0, cache_buf) != want_cache) {
      std::fprintf(stderr, "hash_bench: %s disagrees with zlib crc32\n", impl.name);
      ok = false;
    }
    volatile std::uint32_t sink = 0;
    const std::size_t reps = cache_repeats(cfg);
    const double c = gbps(cfg.runs, reps * cache_buf.size(), [&] {
      std::uint32_t crc = 0;
      for (std::size_t i = 0; i < reps; ++i) crc = impl.update(crc, cache_buf);
      sink = crc;
    });
    const double l = gbps(cfg.runs, large_buf.size(), [&] { sink = impl.update(0, large_buf); });
    print_row(impl.name, c, l);
  }
  return ok;
}

bool run_sha(const config& cfg, bytes_view cache_buf, bytes_view large_buf) {
  const auto want = openssl_sha(large_buf), want_cache = openssl_sha(cache_buf);
  bool ok = true;
  for (const auto& impl : sha_impls) {
    if (impl.digest(large_buf) != want || impl.digest(cache_buf) != want_cache) {
      std::fprintf(stderr, "hash_bench: %s disagrees with OpenSSL SHA-256\n", impl.name);
      ok = false;
    }
    volatile std::uint8_t sink = 0;
    const std::size_t reps = cache_repeats(cfg);
    const double c = gbps(cfg.runs, reps * cache_buf.size(), [&] {
      for (std::size_t i = 0; i < reps; ++i) sink = impl.digest(cache_buf)[0];
    });
    const double l = gbps(cfg.runs, large_buf.size(), [&] { sink = impl.digest(large_buf)[0]; });
    print_row(impl.name, c, l);
  }
  return ok;
}

// Median ns per call of fn(i) over `calls` calls.
template <class Fn>
double ns_per_call(int runs, std::size_t calls, Fn fn) {
  std::vector<double> samples;
  for (int r = 0; r < runs; ++r) {
    const double start = cpu_now();
    for (std::size_t i = 0; i < calls; ++i) fn(i);
    samples.push_back(seconds_since(start) * 1e9 / static_cast<double>(calls));
  }
  return median(samples);
}

// crc32_combine on pieces: the cost per combine against the cost of the CRC it joins.
bool run_combine(const config& cfg, bytes_view large_buf) {
  bool ok = true;
  for (std::size_t piece : {std::size_t{64} << 10, std::size_t{2} << 20, std::size_t{64} << 20}) {
    if (piece > large_buf.size()) continue;
    const auto a = large_buf.first(large_buf.size() - piece), b = large_buf.last(piece);
    const std::uint32_t ca = tz::crc32_update(0, a), cb = tz::crc32_update(0, b);
    if (tz::crc32_combine(ca, cb, b.size()) != zlib_crc(0, large_buf)) ok = false;
    volatile std::uint32_t sink = 0;
    const double combine_ns = ns_per_call(cfg.runs, 100000, [&](std::size_t i) {
      sink = tz::crc32_combine(ca ^ static_cast<std::uint32_t>(i), cb, piece);
    });
    const double crc_ns = ns_per_call(cfg.runs, 4, [&](std::size_t) { sink = tz::crc32_update(0, b); });
    std::printf("  tz::crc32_combine, piece %6zu KiB      %8.1f ns/call   (CRC of the piece: %.0f ns, %.4f%%)\n",
                piece >> 10, combine_ns, crc_ns, 100.0 * combine_ns / crc_ns);
  }
  if (!ok) std::fprintf(stderr, "hash_bench: tz::crc32_combine disagrees with the one-shot CRC\n");
  return ok;
}

// A SHA-256 object per tensor: made, fed 64 bytes (one block, about a header), finished. Nearly all
// of it is the object's cost, which every tensor pays.
void run_per_tensor(const config& cfg, bytes_view large_buf) {
  const auto piece = large_buf.first(64);
  for (const auto& impl : sha_impls) {
    volatile std::uint8_t sink = 0;
    const double ns = ns_per_call(cfg.runs, 20000, [&](std::size_t) { sink = impl.digest(piece)[0]; });
    std::printf("  %-38s %8.1f ns per object + 64 B + finish\n", impl.name, ns);
  }
}

double memcpy_gbps(const config& cfg, bytes_view src, std::size_t reps) {
  std::vector<std::byte> dst(src.size());
  return gbps(cfg.runs, reps * src.size(), [&] {
    for (std::size_t i = 0; i < reps; ++i) std::memcpy(dst.data(), src.data(), src.size());
  });
}

config parse_args(int argc, char** argv) {
  config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--smoke") {
      cfg.smoke = true;
      cfg.large_bytes = std::size_t{4} << 20;
      cfg.cache_total = std::size_t{4} << 20;
      cfg.runs = 1;
    } else if (arg == "--runs" && i + 1 < argc) {
      cfg.runs = std::max(1, std::atoi(argv[++i]));
    } else {
      cfg.large_bytes = std::max<std::size_t>(1, std::strtoull(arg.c_str(), nullptr, 10)) << 20;
    }
  }
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  const config cfg = parse_args(argc, argv);
  if (sodium_init() < 0) return 1;
  const auto wall_start = std::chrono::steady_clock::now();
  const double cpu_start = cpu_now();
  const auto large = random_bytes(cfg.large_bytes);
  const auto cache = random_bytes(cfg.cache_bytes);
  std::printf("hash_bench: 1 thread, in-cache %zu KiB x %zu, large %zu MiB, median of %d%s\n", cfg.cache_bytes >> 10,
              cache_repeats(cfg), cfg.large_bytes >> 20, cfg.runs, cfg.smoke ? " (smoke)" : "");
  std::printf("  %-38s %13s %13s\n", "", "in cache", "large");
  print_row("reference: memcpy", memcpy_gbps(cfg, cache, cache_repeats(cfg)), memcpy_gbps(cfg, large, 1));
  std::printf("CRC-32 (zlib polynomial):\n");
  bool ok = run_crc(cfg, cache, large);
  std::printf("SHA-256:\n");
  ok = run_sha(cfg, cache, large) && ok;
  std::printf("combine and per-tensor costs:\n");
  ok = run_combine(cfg, large) && ok;
  run_per_tensor(cfg, large);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  std::printf("the bench thread ran %.0f%% of the wall time (the rest: other processes)\n",
              100.0 * seconds_since(cpu_start) / wall);
  return ok ? 0 : 1;
}

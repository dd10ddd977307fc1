// Question: how much does encryption cost a load? Measures, in one run, the libsodium
// secretbox_open limit of this machine (2 MiB chunks, one thread per core), a warm plain load and a
// warm encrypted load of the same tensors (medians of several runs), and prints
// encrypted / min(plain, decrypt limit) — the target is >= 0.9. Both loads run twice per round:
// into fresh memory (the loader's own allocation, after pretouch.hpp's warm-up) and into memory
// the process already touched, like the limit's buffer: the second pair compares the pipeline
// with the limit like for like, the first adds the kernel's zeroing of fresh pages on the same
// cores. TZ_BENCH_RUNS=N sets the rounds (default 5); TZ_BENCH_DEBUG=1 prints each load's stages.
// --json FILE (anywhere in the arguments) also writes every run for bench/charts.py (bench_json.hpp).
#include "tz/backends/file_source.hpp"
#include "tz/format/encryption.hpp"
#include "tz/format/writer.hpp"
#include "tz/engine/loader.hpp"
#include "bench_json.hpp"
#include "pretouch.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The plain model: bfloat16 matrices of 2-22 MiB and small norms, like a transformer's layers.
void write_models(const std::string& plain, const std::string& encrypted, std::uint64_t size_bytes,
                  const tz::crypto::secret_key& key) {
  auto enc = tz::format::tensorizer_encryptor::from_key(tz::crypto::secret_key::from_bytes(key.bytes()).value());
  auto wp = tz::format::tensor_writer::create(plain).value();
  auto we = tz::format::tensor_writer::create(encrypted, {.encryptor = &enc}).value();
  auto bf16 = tz::format::dtype_from_torch("bfloat16").value();
  const std::uint64_t sizes[] = {8 << 20, 8 << 20, 22 << 20, 2 << 20, 4096};
  std::vector<std::byte> buf(22 << 20);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  std::uint64_t written = 0;
  for (int n = 0; written < size_bytes; ++n) {
    const std::uint64_t len = sizes[n % 5];
    tz::format::tensor_write t{tz::format::plain_path("t" + std::to_string(n)), tz::format::tensor_type::param, 0,
                               bf16, {len / 2}, std::span<const std::byte>(buf).first(len), false};
    wp.write(t).value();
    we.write(t).value();
    written += len;
  }
  wp.close().value();
  we.close().value();
}

// secretbox_open over `bytes` in 2 MiB chunks on `threads` threads (sealed first); GB/s.
double open_limit(std::uint64_t bytes, unsigned threads, const tz::crypto::secret_key& key) {
  std::vector<std::byte> data(bytes, std::byte{7});
  const auto nonce = tz::crypto::random_nonce();
  const auto macs = tz::crypto::seal_tensor(data, key, nonce);
  const tz::crypto::chunk_layout layout{bytes};
  auto t0 = clock_type::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const std::uint64_t n = layout.count(), first = n * t / threads, end = n * (t + 1) / threads;
      auto r = layout.range({first, end});
      (void)tz::crypto::open_chunks(std::span(data).subspan(r.offset_bytes, r.size_bytes), layout, {first, end}, key,
                                    nonce, macs);
    });
  }
  for (auto& th : pool) th.join();
  return static_cast<double>(bytes) / std::chrono::duration<double>(clock_type::now() - t0).count() / 1e9;
}

// First touch of `bytes` of fresh memory (transparent huge pages, as the loader allocates) on
// `threads` threads, after pretouch.hpp's warm-up: the kernel's page zeroing that a load into fresh
// memory pays on the same cores as its decryption. GB/s of memory touched.
double first_touch_gbps(std::uint64_t bytes, unsigned threads) {
  tz::bench::pretouch(bytes + bytes / 4);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  ::madvise(p, bytes, MADV_HUGEPAGE);
  auto* base = static_cast<std::byte*>(p);
  auto t0 = clock_type::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const std::uint64_t first = bytes * t / threads, end = bytes * (t + 1) / threads;
      for (std::uint64_t at = first; at < end; at += 4096) base[at] = std::byte{1};
    });
  }
  for (auto& th : pool) th.join();
  const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  ::munmap(p, bytes);
  return static_cast<double>(bytes) / s / 1e9;
}

double load_gbps(tz::scheduler& sched, const std::string& path, const tz::format::decryption* d) {
  auto l = tz::loader::open(sched, tz::file_source::open(path).value()).value();
  tz::bench::pretouch(l.index().file_bytes + l.index().file_bytes / 4);  // see pretouch.hpp
  tz::load_options o;
  if (d != nullptr) o.decryption = *d;
  auto t0 = clock_type::now();
  auto r = l.load(sched, {}, o);
  if (!r) {
    std::fprintf(stderr, "load failed: %s\n", r.error().message.c_str());
    std::exit(1);
  }
  const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  if (std::getenv("TZ_BENCH_DEBUG") != nullptr) {
    const auto& t = r->timings();
    std::fprintf(stderr, "  %s: %.3f s, read %.3f, decrypt %.3f worker-s\n", d ? "encrypted" : "plain", s, t.read_s,
                 t.decrypt_s);
  }
  return static_cast<double>(r->bytes()) / s / 1e9;
}

// The same load into memory the process already touched (one buffer for every tensor, reused by
// every run): the pipeline alone, without first-touch costs. GB/s.
double load_into_gbps(tz::scheduler& sched, const std::string& path, const tz::format::decryption* d,
                      std::vector<std::byte>& memory) {
  auto l = tz::loader::open(sched, tz::file_source::open(path).value()).value();
  std::vector<tz::tensor_destination> dst;
  std::uint64_t total = 0;
  for (const auto& e : l.index().tensors) total += e.deserialized_bytes;
  if (memory.size() < total) {
    memory.assign(total, std::byte{0});
  }
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < l.index().tensors.size(); ++i) {
    const auto n = l.index().tensors[i].deserialized_bytes;
    dst.push_back({i, std::span(memory).subspan(at, n)});
    at += n;
  }
  tz::load_options o;
  if (d != nullptr) o.decryption = *d;
  auto t0 = clock_type::now();
  auto r = l.load_into(sched, std::move(dst), o);
  if (!r) {
    std::fprintf(stderr, "load failed: %s\n", r.error().message.c_str());
    std::exit(1);
  }
  return static_cast<double>(total) / std::chrono::duration<double>(clock_type::now() - t0).count() / 1e9;
}

// The two chart panels: encrypted vs the slower of plain and the decrypt limit, as the ratios printed.
void record_json(tz::bench::json_report& report, const std::vector<double>& limit, const std::vector<double>& touch,
                 const std::vector<double>& plain, const std::vector<double>& enc, const std::vector<double>& plain_into,
                 const std::vector<double>& enc_into) {
  const tz::bench::series l{limit};
  tz::bench::series bound;  // per round: 1/(1/limit + 1/touch), as printed from the medians
  for (std::size_t i = 0; i < limit.size() && i < touch.size(); ++i)
    bound.gbps.push_back(1 / (1 / limit[i] + 1 / touch[i]));
  const std::string fresh = "fresh memory (loader-owned)", touched = "memory already touched (load_into)";
  const std::string limit_name = "secretbox_open limit", plain_name = "plain load";
  auto slower = [&](const tz::bench::series& p) { return p.median() < l.median() ? plain_name : limit_name; };
  report.reference(fresh, limit_name, l, "in place, memory already touched");
  report.reference(fresh, "fresh-memory bound", bound, "1/(1/limit + 1/first touch), per round");
  report.reference(fresh, plain_name, {plain});
  report.result(fresh, "encrypted load", {enc}, slower({plain}));
  report.reference(touched, limit_name, l);
  report.reference(touched, plain_name, {plain_into});
  report.result(touched, "encrypted load", {enc_into}, slower({plain_into}));
}

}  // namespace

int main(int argc, char** argv) {
  tz::bench::json_report report("encrypted_load_bench", argc, argv);
  const std::string json = tz::bench::take_json_option(argc, argv);
  const bool smoke = argc > 1 && std::strcmp(argv[1], "--smoke") == 0;
  const std::uint64_t size_mib = smoke ? 16 : (argc > 1 ? std::stoull(argv[1]) : 1024);
  const int runs = smoke ? 1 : (std::getenv("TZ_BENCH_RUNS") ? std::max(1, std::atoi(std::getenv("TZ_BENCH_RUNS"))) : 5);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const auto dir = std::filesystem::temp_directory_path();
  const std::string plain = (dir / ("tz-encbench-" + std::to_string(size_mib) + ".tensors")).string();
  const std::string encrypted = (dir / ("tz-encbench-" + std::to_string(size_mib) + ".enc.tensors")).string();
  auto key = tz::crypto::secret_key::random().value();
  write_models(plain, encrypted, size_mib << 20, key);
  auto decryption = tz::format::decryption::from_key(std::move(key));
  auto limit_key = tz::crypto::secret_key::random().value();
  tz::scheduler sched;
  std::vector<double> limit, touch, plain_gbps, enc_gbps, plain_into, enc_into;
  std::vector<std::byte> memory;
  load_gbps(sched, plain, nullptr);  // warm the page cache
  load_gbps(sched, encrypted, &decryption);
  for (int i = 0; i < runs; ++i) {
    limit.push_back(open_limit(std::min<std::uint64_t>(size_mib, 512) << 20, cores, limit_key));
    touch.push_back(first_touch_gbps(size_mib << 20, cores));
    plain_gbps.push_back(load_gbps(sched, plain, nullptr));
    enc_gbps.push_back(load_gbps(sched, encrypted, &decryption));
    plain_into.push_back(load_into_gbps(sched, plain, nullptr, memory));
    enc_into.push_back(load_into_gbps(sched, encrypted, &decryption, memory));
  }
  const double l = median(limit), p = median(plain_gbps), e = median(enc_gbps);
  std::printf("encrypted_load_bench: %llu MiB, %u threads, medians of %d runs (warm page cache)\n",
              static_cast<unsigned long long>(size_mib), cores, runs);
  auto runs_of = [](const std::vector<double>& v) {
    std::string out;
    for (double x : v) out += (out.empty() ? "" : " ") + std::to_string(x).substr(0, 5);
    return out;
  };
  std::printf("  secretbox_open limit (%u threads)  %7.2f GB/s   runs: %s\n", cores, l, runs_of(limit).c_str());
  std::printf("  plain load                        %7.2f GB/s   runs: %s\n", p, runs_of(plain_gbps).c_str());
  std::printf("  encrypted load                    %7.2f GB/s   runs: %s\n", e, runs_of(enc_gbps).c_str());
  std::printf("  encrypted / min(plain, limit)     %7.2f  (target >= 0.90)\n", e / std::min(p, l));
  // Decrypting into fresh memory costs the decryption plus the kernel's zeroing of the pages, on
  // the same cores: the bound is the harmonic combination of the two rates.
  const double t = median(touch), bound = 1 / (1 / l + 1 / t);
  std::printf("  first touch of fresh memory (%u threads) %5.2f GB/s   runs: %s\n", cores, t, runs_of(touch).c_str());
  std::printf("  fresh-memory bound 1/(1/limit + 1/touch) %5.2f GB/s\n", bound);
  std::printf("  encrypted / min(plain, bound)     %7.2f\n", e / std::min(p, bound));
  const double pi = median(plain_into), ei = median(enc_into);
  std::printf("into memory already touched (the pipeline without first-touch costs):\n");
  std::printf("  plain load                        %7.2f GB/s   runs: %s\n", pi, runs_of(plain_into).c_str());
  std::printf("  encrypted load                    %7.2f GB/s   runs: %s\n", ei, runs_of(enc_into).c_str());
  std::printf("  encrypted / min(plain, limit)     %7.2f  (target >= 0.90)\n", ei / std::min(pi, l));
  std::filesystem::remove(plain);
  std::filesystem::remove(encrypted);
  if (json.empty()) return 0;
  report.set_size_bytes(size_mib << 20);
  record_json(report, limit, touch, plain_gbps, enc_gbps, plain_into, enc_into);
  return report.write(json) ? 0 : 1;
}

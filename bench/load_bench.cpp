// Question: how close to the limit is a load? Measures, in one run, the raw limit (plain pread
// loops, 1 thread and one per core, into fresh and into pre-faulted memory; O_DIRECT for cold) and
// the engine's load of the same file (warm and cold, fresh and existing destination), medians of
// several runs, and prints the ratios. The verified load is measured against the N-core hashing
// limit of the same bytes (hash_limit.hpp). Other loaders (the real tensorizer, safetensors) are
// compared in bench/python_load_bench.py, where every loader, ours included, gets one timed load
// per fresh process into pre-touched memory: here the engine loads many times in one process, and
// a Python peer timed that way would load into memory recycled by its allocator.
// --json FILE also writes every run in the common schema (bench_json.hpp) for bench/charts.py.
#include "tz/backends/file_source.hpp"
#include "tz/format/writer.hpp"
#include "tz/engine/host_memory.hpp"
#include "tz/engine/loader.hpp"
#include "bench_json.hpp"
#include "hash_limit.hpp"
#include "pretouch.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::size_t chunk_bytes = 16 << 20;
constexpr std::size_t direct_chunk_bytes = 4 << 20;

struct bench_args {
  std::string file;
  std::uint64_t size_mib = 1024;
  int runs = 5;
  bool smoke = false;
  bool cold = true;
  std::string json;  // --json FILE: also write every run there (bench_json.hpp)
};

// A transformer-shaped model: per layer three large bfloat16 matrices and two small float32 norms.
void generate_model(const std::string& path, std::uint64_t size_bytes) {
  auto w = tz::format::tensor_writer::create(path).value();
  auto bf16 = tz::format::dtype_from_torch("torch.bfloat16").value();
  auto f32 = tz::format::dtype_from_torch("torch.float32").value();
  const std::uint64_t sizes[] = {8 << 20, 8 << 20, 22 << 20, 4096, 4096};
  std::vector<std::byte> buf(22 << 20);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  std::uint64_t written = 0;
  for (int layer = 0; written < size_bytes; ++layer) {
    for (int k = 0; k < 5 && written < size_bytes; ++k) {
      std::uint64_t n = std::min(sizes[k], std::max<std::uint64_t>(4096, size_bytes - written));
      tz::format::tensor_write t;
      t.path = tz::format::plain_path("layers." + std::to_string(layer) + ".w" + std::to_string(k));
      t.dtype = k < 3 ? bf16 : f32;
      t.shape = {n / t.dtype.itemsize};
      t.data = std::span<const std::byte>(buf).first(n);
      w.write(t).value();
      written += n;
    }
  }
  w.close().value();
}

using tz::bench::series;

// GB/s of `runs` runs of fn(), which returns the bytes it delivered. `before` runs untimed.
series measure(int runs, const std::function<void()>& before, const std::function<std::uint64_t()>& fn) {
  series out;
  for (int r = 0; r < runs; ++r) {
    if (before) before();
    auto t0 = clock_type::now();
    std::uint64_t bytes = fn();
    double s = std::chrono::duration<double>(clock_type::now() - t0).count();
    out.gbps.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  return out;
}

// Plain pread loops over [0, size) into dst, split evenly over `threads` threads.
void pread_all(int fd, std::span<std::byte> dst, unsigned threads, std::size_t chunk) {
  std::vector<std::thread> pool;
  std::size_t share = (dst.size() / threads + chunk - 1) / chunk * chunk;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([=] {
      std::size_t begin = std::min(dst.size(), t * share), end = std::min(dst.size(), begin + share);
      for (std::size_t off = begin; off < end;) {
        ssize_t n = ::pread(fd, dst.data() + off, std::min(chunk, end - off), static_cast<off_t>(off));
        if (n <= 0) {
          if (n < 0 && errno == EINTR) continue;
          std::fprintf(stderr, "pread failed at %zu\n", off);
          std::exit(1);
        }
        off += static_cast<std::size_t>(n);
      }
    });
  }
  for (auto& th : pool) th.join();
}

void drop_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

struct result_row {
  std::string name;
  double gbps = 0;
};

// The chart panels of --json (bench_json.hpp): each holds its loaders and their same-run references.
const std::string warm_fresh_group = "warm, fresh memory";
const std::string warm_existing_group = "warm, existing memory";
const std::string verify_group = "warm, fresh memory, --verify (vs hashing limit)";
const std::string cold_fresh_group = "cold (page cache dropped), fresh memory";
const std::string cold_existing_group = "cold (page cache dropped), existing memory";

// What the measurements of one run share.
struct bench_context {
  const bench_args& a;
  int fd;
  std::uint64_t file_bytes;
  unsigned cores;
  tz::host_buffer& existing;
  tz::scheduler& sched;
  std::vector<result_row>& rows;
  tz::bench::json_report& report;
  std::function<void()> warm, touch;
};

struct hash_limit_result {
  series split, fused;
  std::size_t mismatches = 0;  // tensors whose recomputed hashes differ from the stored ones
};

// The N-core hashing limit of the file's tensors, the file in memory at `file`: GB/s of the split
// and fused schedules (hash_limit.hpp), counted in data bytes as the loads are.
hash_limit_result measure_hash_limit(const tz::format::file_index& index, std::span<const std::byte> file,
                                     unsigned threads, int runs) {
  std::vector<tz::format::tensor_header> headers;
  const auto tensors = tz::bench::hashed_tensors(index, file, headers);
  std::uint64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.data.size();
  std::size_t bad = 0;
  series split = measure(runs, {}, [&] {
    bad = std::max(bad, tz::bench::hash_split(tensors, threads).mismatches(tensors));
    return bytes;
  });
  series fused = measure(runs, {}, [&] {
    bad = std::max(bad, tz::bench::hash_fused(tensors, threads).mismatches(tensors));
    return bytes;
  });
  return {std::move(split), std::move(fused), bad};
}

void print_row(const result_row& r) { std::printf("  %-48s %7.2f GB/s\n", r.name.c_str(), r.gbps); }

bool parse(int argc, char** argv, bench_args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--smoke") a.smoke = true;
    else if (s == "--peers") {
      std::fprintf(stderr, "load_bench: --peers is gone: bench/python_load_bench.py compares the loaders\n");
      return false;
    }
    else if (s == "--no-cold") a.cold = false;
    else if (s == "--file" && i + 1 < argc) a.file = argv[++i];
    else if (s == "--size-mib" && i + 1 < argc) a.size_mib = std::strtoull(argv[++i], nullptr, 10);
    else if (s == "--runs" && i + 1 < argc) a.runs = std::atoi(argv[++i]);
    else if (s == "--json" && i + 1 < argc) a.json = argv[++i];
    else return false;
  }
  if (a.smoke) {
    a.size_mib = 16;
    a.runs = 1;
  }
  return a.runs > 0 && a.size_mib > 0;
}

// Raw pread references, warm: 1 thread and one per core, into fresh, fresh THP and existing memory.
// Returns the best fresh and the best existing median.
std::pair<double, double> measure_raw_warm(bench_context& c) {
  double raw_fresh = 0, raw_existing = 0;
  int i = 0;
  for (unsigned t : {1u, c.cores}) {
    const series f = measure(c.a.runs, c.touch, [&] {
      tz::host_buffer b(c.file_bytes);
      pread_all(c.fd, b.bytes(), t, chunk_bytes);
      return c.file_bytes;
    });
    const series e = measure(c.a.runs, {}, [&] {
      pread_all(c.fd, c.existing.bytes().first(c.file_bytes), t, chunk_bytes);
      return c.file_bytes;
    });
    // The same with transparent huge pages, as the loader maps its own memory: the fairest raw
    // reference for "fresh memory" (far fewer page faults).
    const series h = measure(c.a.runs, c.touch, [&] {
      tz::host_buffer b(c.file_bytes, true);
      pread_all(c.fd, b.bytes(), t, chunk_bytes);
      return c.file_bytes;
    });
    const std::string thr = std::to_string(t) + " thread(s)";
    c.rows.push_back({"raw pread warm, fresh memory, " + thr, f.median()});
    c.rows.push_back({"raw pread warm, fresh THP memory, " + thr, h.median()});
    c.rows.push_back({"raw pread warm, existing memory, " + thr, e.median()});
    if (i++ == 0 || t != 1) {  // one core: the same measurement twice, one entry
      c.report.reference(warm_fresh_group, "raw pread, " + thr, f);
      c.report.reference(warm_fresh_group, "raw pread, THP, " + thr, h);
      c.report.reference(warm_existing_group, "raw pread, " + thr, e);
    }
    raw_fresh = std::max({raw_fresh, f.median(), h.median()});
    raw_existing = std::max(raw_existing, e.median());
  }
  return {raw_fresh, raw_existing};
}

std::function<std::uint64_t()> engine_fresh(tz::scheduler& sched, std::shared_ptr<tz::file_source> src, bool verify) {
  return [&sched, src, verify] {
    auto l = tz::loader::open_or_throw(sched, src);
    tz::load_options o;
    o.verify = verify;
    auto r = l.load_or_throw(sched, {}, o);
    return r.bytes();
  };
}

std::function<std::uint64_t()> engine_existing(tz::scheduler& sched, tz::host_buffer& existing,
                                               std::shared_ptr<tz::file_source> src) {
  return [&sched, &existing, src] {
    auto l = tz::loader::open_or_throw(sched, src);
    std::vector<tz::tensor_destination> dst;
    std::uint64_t bytes = 0;
    // Each tensor at its file offset: the same page phase as the file, so O_DIRECT applies too.
    for (std::size_t i = 0; i < l.index().tensors.size(); ++i) {
      const auto& e = l.index().tensors[i];
      dst.push_back({i, existing.bytes().subspan(e.data_offset, e.deserialized_bytes)});
      bytes += e.deserialized_bytes;
    }
    tz::unwrap(l.load_into(sched, dst));
    return bytes;
  };
}

struct engine_warm_result {
  double fresh = 0, existing = 0, verify = 0, hash_limit = 0;
  bool hashes_ok = true;
};

// The engine, warm (fresh memory, load_into, --verify), then the hashing limit the verified load
// is compared with.
engine_warm_result measure_engine_warm(bench_context& c, std::shared_ptr<tz::file_source> buffered) {
  auto warm_touch = [&] { c.warm(), c.touch(); };
  const series fresh = measure(c.a.runs, warm_touch, engine_fresh(c.sched, buffered, false));
  const series existing = measure(c.a.runs, c.warm, engine_existing(c.sched, c.existing, buffered));
  const series verify = measure(c.a.runs, warm_touch, engine_fresh(c.sched, buffered, true));
  c.rows.push_back({"engine warm, fresh memory (loader-owned)", fresh.median()});
  c.rows.push_back({"engine warm, existing memory (load_into)", existing.median()});
  c.rows.push_back({"engine warm, fresh memory, --verify", verify.median()});
  c.report.result(warm_fresh_group, "engine (loader-owned memory)", fresh);
  c.report.result(warm_existing_group, "engine (load_into)", existing);
  c.report.result(verify_group, "engine --verify", verify);
  c.warm();  // `existing` holds the whole file again
  const auto limit = measure_hash_limit(tz::loader::open_or_throw(c.sched, buffered).index(),
                                        c.existing.bytes().first(c.file_bytes), c.cores, c.a.runs);
  engine_warm_result r{fresh.median(), existing.median(), verify.median(),
                       std::max(limit.split.median(), limit.fused.median()), limit.mismatches == 0};
  // Only an encrypted --file (hashes cover the plaintext) may differ; for ours it is a bug.
  if (limit.mismatches > 0)
    std::fprintf(stderr, "load_bench: hash limit: %zu tensors differ from their stored hashes\n", limit.mismatches);
  const std::string thr = std::to_string(c.cores) + " thr";
  c.rows.push_back({"hash limit, " + thr + ": SHA/tensor + CRC pieces", limit.split.median()});
  c.rows.push_back({"hash limit, " + thr + ": fused per tensor", limit.fused.median()});
  c.report.reference(verify_group, "hash limit, " + thr + ", split", limit.split, "SHA-256 per tensor + CRC32 pieces");
  c.report.reference(verify_group, "hash limit, " + thr + ", fused", limit.fused, "fused per tensor");
  return r;
}

struct cold_result {
  double raw_fresh = 0, raw_existing = 0, engine_fresh = 0, engine_existing = 0;
};

// Cold: page cache dropped for the file before each run; raw O_DIRECT (best of 1/N threads) vs
// the engine with --direct.
cold_result measure_cold(bench_context& c, int dfd, std::shared_ptr<tz::file_source> direct) {
  cold_result r;
  const std::uint64_t aligned = c.file_bytes / tz::page_bytes * tz::page_bytes;
  auto drop = [&] { drop_cache(c.a.file); };
  auto drop_touch = [&] { drop_cache(c.a.file), c.touch(); };
  std::string best_existing;
  int i = 0;
  for (unsigned t : {1u, c.cores}) {
    const series f = measure(c.a.runs, drop_touch, [&] {
      tz::host_buffer b(aligned);
      pread_all(dfd, b.bytes(), t, direct_chunk_bytes);
      return aligned;
    });
    const series e = measure(c.a.runs, drop, [&] {
      pread_all(dfd, c.existing.bytes().first(aligned), t, direct_chunk_bytes);
      return aligned;
    });
    const std::string name = "raw O_DIRECT, " + std::to_string(t) + " thread(s)";
    if (i++ == 0 || t != 1) {
      c.report.reference(cold_fresh_group, name, f);
      c.report.reference(cold_existing_group, name, e);
    }
    r.raw_fresh = std::max(r.raw_fresh, f.median());
    if (e.median() >= r.raw_existing) r.raw_existing = e.median(), best_existing = name;
  }
  c.rows.push_back({"raw O_DIRECT cold, fresh memory (best of 1/N thr)", r.raw_fresh});
  c.rows.push_back({"raw O_DIRECT cold, existing memory (best of 1/N thr)", r.raw_existing});
  const series buffered = measure(c.a.runs, drop, [&] {
    pread_all(c.fd, c.existing.bytes().first(c.file_bytes), 1, chunk_bytes);
    return c.file_bytes;
  });
  c.rows.push_back({"raw buffered cold, existing memory, 1 thread", buffered.median()});
  c.report.reference(cold_existing_group, "raw buffered read, 1 thread", buffered);
  const series ef = measure(c.a.runs, drop_touch, engine_fresh(c.sched, direct, false));
  const series ee = measure(c.a.runs, drop, engine_existing(c.sched, c.existing, direct));
  r.engine_fresh = ef.median();
  r.engine_existing = ee.median();
  c.rows.push_back({"engine cold --direct, fresh memory", r.engine_fresh});
  c.rows.push_back({"engine cold --direct, existing memory", r.engine_existing});
  c.report.result(cold_fresh_group, "engine --direct", ef);
  // The buffered read is drawn beside it, but the ratio stays engine / best raw O_DIRECT.
  c.report.result(cold_existing_group, "engine --direct", ee, best_existing);
  return r;
}

void print_ratios(const std::pair<double, double>& raw, const engine_warm_result& w, const cold_result& cold) {
  std::printf("ratios (target):\n");
  std::printf("  engine warm fresh / best raw fresh        %.2f  (>= 0.95)\n", w.fresh / raw.first);
  std::printf("  engine warm existing / best raw existing  %.2f  (>= 0.95)\n", w.existing / raw.second);
  std::printf("  engine warm --verify / min(engine warm fresh, hash limit)  %.2f  (>= 0.9)\n",
              w.verify / std::min(w.fresh, w.hash_limit));
  if (cold.engine_fresh > 0) {
    std::printf("  engine cold fresh / raw O_DIRECT fresh    %.2f  (>= 0.95)\n", cold.engine_fresh / cold.raw_fresh);
    std::printf("  engine cold existing / raw O_DIRECT exist %.2f  (>= 0.95)\n", cold.engine_existing / cold.raw_existing);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench_args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr, "usage: load_bench [--smoke] [--file F] [--size-mib N] [--runs N] [--no-cold] [--json F]\n");
    return 2;
  }
  bool generated = a.file.empty();
  if (generated) {
    a.file = (std::filesystem::temp_directory_path() / ("tz_load_bench_" + std::to_string(a.size_mib) + "m.tensors")).string();
    if (!std::filesystem::exists(a.file) || a.smoke) generate_model(a.file, a.size_mib << 20);
  }
  const std::uint64_t file_bytes = std::filesystem::file_size(a.file);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  tz::scheduler sched(0);
  std::printf("load_bench: %s, %llu bytes, %u cores, %d runs (median), 16 MiB pread chunks\n", a.file.c_str(),
              static_cast<unsigned long long>(file_bytes), cores, a.runs);

  int fd = ::open(a.file.c_str(), O_RDONLY);
  tz::host_buffer existing(file_bytes + tz::page_bytes);
  tz::prefault(existing.bytes());
  std::vector<result_row> rows;
  tz::bench::json_report report("load_bench", argc, argv);
  report.set_size_bytes(file_bytes);
  const std::uint64_t touch_bytes = file_bytes + file_bytes / 4;
  bench_context c{a, fd, file_bytes, cores, existing, sched, rows, report,
                  [&] { pread_all(fd, existing.bytes().first(file_bytes), cores, chunk_bytes); },
                  [&] { tz::bench::pretouch(touch_bytes); }};  // see pretouch.hpp
  c.warm();

  const auto raw = measure_raw_warm(c);
  const auto w = measure_engine_warm(c, tz::file_source::open(a.file).value());
  if (!w.hashes_ok && generated) return 1;
  cold_result cold;
  int dfd = a.cold ? ::open(a.file.c_str(), O_RDONLY | O_DIRECT) : -1;
  if (dfd >= 0) {
    cold = measure_cold(c, dfd, tz::file_source::open(a.file, {true, false}).value());
    ::close(dfd);
  }
  ::close(fd);
  for (const auto& r : rows) print_row(r);
  print_ratios(raw, w, cold);
  if (generated && a.smoke) std::filesystem::remove(a.file);
  return a.json.empty() || report.write(a.json) ? 0 : 1;
}

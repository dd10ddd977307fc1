// Question: how close to the limit is a load? Measures, in one run, the raw limit (plain pread
// loops, 1 thread and one per core, into fresh and into pre-faulted memory; O_DIRECT for cold) and
// the engine's load of the same file (warm and cold, fresh and existing destination), medians of
// several runs, and prints the ratios. --peers also runs the real tensorizer and safetensors.
// The verified load is measured against the N-core hashing limit of the same bytes (hash_limit.hpp).
#include "tz/file_source.hpp"
#include "tz/format/writer.hpp"
#include "tz/host_memory.hpp"
#include "tz/loader.hpp"
#include "hash_limit.hpp"
#include "pretouch.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
  bool peers = false;
  bool cold = true;
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median GB/s of `runs` runs of fn(), which returns the bytes it delivered. `before` runs untimed.
double measure(int runs, const std::function<void()>& before, const std::function<std::uint64_t()>& fn) {
  std::vector<double> gbps;
  for (int r = 0; r < runs; ++r) {
    if (before) before();
    auto t0 = clock_type::now();
    std::uint64_t bytes = fn();
    double s = std::chrono::duration<double>(clock_type::now() - t0).count();
    gbps.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  return median(gbps);
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

struct hash_limit_result {
  double split_gbps = 0, fused_gbps = 0;
  std::size_t mismatches = 0;  // tensors whose recomputed hashes differ from the stored ones
};

// The N-core hashing limit of the file's tensors, the file in memory at `file`: median GB/s of the
// split and fused schedules (hash_limit.hpp), counted in data bytes as the loads are.
hash_limit_result measure_hash_limit(const tz::format::file_index& index, std::span<const std::byte> file,
                                     unsigned threads, int runs) {
  std::vector<tz::format::tensor_header> headers;
  const auto tensors = tz::bench::hashed_tensors(index, file, headers);
  std::uint64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.data.size();
  std::size_t bad = 0;
  const double split = measure(runs, {}, [&] {
    bad = std::max(bad, tz::bench::hash_split(tensors, threads).mismatches(tensors));
    return bytes;
  });
  const double fused = measure(runs, {}, [&] {
    bad = std::max(bad, tz::bench::hash_fused(tensors, threads).mismatches(tensors));
    return bytes;
  });
  return {split, fused, bad};
}

void print_row(const result_row& r) { std::printf("  %-48s %7.2f GB/s\n", r.name.c_str(), r.gbps); }

// Runs a python peer script; returns the GB/s it reports on its "RESULT <gbps>" line (0 if none).
double run_peer(const std::string& script, const std::string& file, int runs) {
  std::string cmd = "python3 " + script + " " + file + " --runs " + std::to_string(runs) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return 0;
  char line[512];
  double gbps = 0;
  while (std::fgets(line, sizeof line, p)) {
    std::fputs(("    | " + std::string(line)).c_str(), stdout);
    if (std::strncmp(line, "RESULT ", 7) == 0) gbps = std::atof(line + 7);
  }
  ::pclose(p);
  return gbps;
}

bool parse(int argc, char** argv, bench_args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--smoke") a.smoke = true;
    else if (s == "--peers") a.peers = true;
    else if (s == "--no-cold") a.cold = false;
    else if (s == "--file" && i + 1 < argc) a.file = argv[++i];
    else if (s == "--size-mib" && i + 1 < argc) a.size_mib = std::strtoull(argv[++i], nullptr, 10);
    else if (s == "--runs" && i + 1 < argc) a.runs = std::atoi(argv[++i]);
    else return false;
  }
  if (a.smoke) {
    a.size_mib = 16;
    a.runs = 1;
    a.peers = false;
  }
  return a.runs > 0 && a.size_mib > 0;
}

}  // namespace

int main(int argc, char** argv) {
  bench_args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr, "usage: load_bench [--smoke] [--file F] [--size-mib N] [--runs N] [--peers] [--no-cold]\n");
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
  auto warm = [&] { pread_all(fd, existing.bytes().first(file_bytes), cores, chunk_bytes); };
  warm();

  // Raw references, warm.
  double raw_fresh = 0, raw_existing = 0;
  const std::uint64_t touch_bytes = file_bytes + file_bytes / 4;
  auto touch = [&] { tz::bench::pretouch(touch_bytes); };  // see pretouch.hpp
  for (unsigned t : {1u, cores}) {
    double f = measure(a.runs, touch, [&] {
      tz::host_buffer b(file_bytes);
      pread_all(fd, b.bytes(), t, chunk_bytes);
      return file_bytes;
    });
    double e = measure(a.runs, {}, [&] {
      pread_all(fd, existing.bytes().first(file_bytes), t, chunk_bytes);
      return file_bytes;
    });
    // The same with transparent huge pages, as the loader maps its own memory: the fairest raw
    // reference for "fresh memory" (far fewer page faults).
    double h = measure(a.runs, touch, [&] {
      tz::host_buffer b(file_bytes, true);
      pread_all(fd, b.bytes(), t, chunk_bytes);
      return file_bytes;
    });
    rows.push_back({"raw pread warm, fresh memory, " + std::to_string(t) + " thread(s)", f});
    rows.push_back({"raw pread warm, fresh THP memory, " + std::to_string(t) + " thread(s)", h});
    f = std::max(f, h);
    rows.push_back({"raw pread warm, existing memory, " + std::to_string(t) + " thread(s)", e});
    raw_fresh = std::max(raw_fresh, f);
    raw_existing = std::max(raw_existing, e);
  }

  // The engine, warm.
  auto buffered = tz::file_source::open(a.file).value();
  auto direct = tz::file_source::open(a.file, {true, false}).value();
  auto engine_fresh = [&](std::shared_ptr<tz::file_source> src, bool verify) {
    return [&sched, src, verify] {
      auto l = tz::loader::open_or_throw(sched, src);
      tz::load_options o;
      o.verify = verify;
      auto r = l.load_or_throw(sched, {}, o);
      return r.bytes();
    };
  };
  auto engine_existing = [&](std::shared_ptr<tz::file_source> src) {
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
  };
  auto warm_touch = [&] { warm(), touch(); };
  double eng_fresh = measure(a.runs, warm_touch, engine_fresh(buffered, false));
  double eng_existing = measure(a.runs, warm, engine_existing(buffered));
  double eng_verify = measure(a.runs, warm_touch, engine_fresh(buffered, true));
  rows.push_back({"engine warm, fresh memory (loader-owned)", eng_fresh});
  rows.push_back({"engine warm, existing memory (load_into)", eng_existing});
  rows.push_back({"engine warm, fresh memory, --verify", eng_verify});
  warm();  // `existing` holds the whole file again
  const auto limit = measure_hash_limit(tz::loader::open_or_throw(sched, buffered).index(),
                                        existing.bytes().first(file_bytes), cores, a.runs);
  // Only an encrypted --file (hashes cover the plaintext) may differ; for ours it is a bug.
  if (limit.mismatches > 0) {
    std::fprintf(stderr, "load_bench: hash limit: %zu tensors differ from their stored hashes\n", limit.mismatches);
    if (generated) return 1;
  }
  const double hash_limit_gbps = std::max(limit.split_gbps, limit.fused_gbps);
  rows.push_back({"hash limit, " + std::to_string(cores) + " thr: SHA/tensor + CRC pieces", limit.split_gbps});
  rows.push_back({"hash limit, " + std::to_string(cores) + " thr: fused per tensor", limit.fused_gbps});

  // Cold: page cache dropped for the file before each run.
  double raw_cold_fresh = 0, raw_cold_existing = 0, eng_cold_fresh = 0, eng_cold_existing = 0;
  int dfd = a.cold ? ::open(a.file.c_str(), O_RDONLY | O_DIRECT) : -1;
  if (dfd >= 0) {
    std::uint64_t aligned = file_bytes / tz::page_bytes * tz::page_bytes;
    auto drop = [&] { drop_cache(a.file); };
    auto drop_touch = [&] { drop_cache(a.file), touch(); };
    for (unsigned t : {1u, cores}) {
      raw_cold_fresh = std::max(raw_cold_fresh, measure(a.runs, drop_touch, [&] {
        tz::host_buffer b(aligned);
        pread_all(dfd, b.bytes(), t, direct_chunk_bytes);
        return aligned;
      }));
      raw_cold_existing = std::max(raw_cold_existing, measure(a.runs, drop, [&] {
        pread_all(dfd, existing.bytes().first(aligned), t, direct_chunk_bytes);
        return aligned;
      }));
    }
    rows.push_back({"raw O_DIRECT cold, fresh memory (best of 1/N thr)", raw_cold_fresh});
    rows.push_back({"raw O_DIRECT cold, existing memory (best of 1/N thr)", raw_cold_existing});
    rows.push_back({"raw buffered cold, existing memory, 1 thread", measure(a.runs, drop, [&] {
                      pread_all(fd, existing.bytes().first(file_bytes), 1, chunk_bytes);
                      return file_bytes;
                    })});
    eng_cold_fresh = measure(a.runs, drop_touch, engine_fresh(direct, false));
    eng_cold_existing = measure(a.runs, drop, engine_existing(direct));
    rows.push_back({"engine cold --direct, fresh memory", eng_cold_fresh});
    rows.push_back({"engine cold --direct, existing memory", eng_cold_existing});
    ::close(dfd);
  }
  ::close(fd);
  for (const auto& r : rows) print_row(r);

  std::printf("ratios (target):\n");
  std::printf("  engine warm fresh / best raw fresh        %.2f  (>= 0.95)\n", eng_fresh / raw_fresh);
  std::printf("  engine warm existing / best raw existing  %.2f  (>= 0.95)\n", eng_existing / raw_existing);
  std::printf("  engine warm --verify / min(engine warm fresh, hash limit)  %.2f  (>= 0.9)\n",
              eng_verify / std::min(eng_fresh, hash_limit_gbps));
  if (eng_cold_fresh > 0) {
    std::printf("  engine cold fresh / raw O_DIRECT fresh    %.2f  (>= 0.95)\n", eng_cold_fresh / raw_cold_fresh);
    std::printf("  engine cold existing / raw O_DIRECT exist %.2f  (>= 0.95)\n", eng_cold_existing / raw_cold_existing);
  }
  if (a.peers) {
    std::string dir = std::filesystem::path(__FILE__).parent_path().string() + "/peers/";
    double tzr = run_peer(dir + "tensorizer_peer.py", a.file, a.runs);
    double st = run_peer(dir + "safetensors_peer.py", a.file, a.runs);
    std::printf("  real tensorizer (best num_readers)        %7.2f GB/s\n", tzr);
    std::printf("  safetensors load_file (converted file)    %7.2f GB/s\n", st);
    if (tzr > 0) {
      std::printf("  engine warm fresh / tensorizer            %.2f  (>= 1.3)\n", eng_fresh / tzr);
      std::printf("  engine warm existing / tensorizer         %.2f  (>= 2.5)\n", eng_existing / tzr);
    }
  }
  if (generated && a.smoke) std::filesystem::remove(a.file);
  return 0;
}

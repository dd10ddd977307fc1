// Question: how close does a load to GPU memory come to the pinned host->device copy limit?
// In one run: the pinned cudaMemcpyAsync bandwidth (the limit), then load_to_device of one file
// from the page cache (warm) and from disk with O_DIRECT after dropping its pages (cold); medians
// of several runs, ratios to the limit, per-stage times and the pinned bytes held vs the ring. A
// second reference, threads preading the file into pinned slots without uploading, shows the host
// side's own limit (page-cache copy bandwidth, or the disk when cold). A third reference, the
// plainest pipeline (threads preading into their own pinned slots and copying with cudaMemcpyAsync,
// no engine), separates what the engine costs from what the host costs. --configs compares more rings (slots x size, readers) in the same
// run, each load against its own plain pipeline. --references adds the host side's limits with DMA running: the
// same reads (pread, or a populated mapping and memcpy) while pinned copies of another buffer go
// to the device, which shows how much each slows the other on this host's memory.
// Without --file it writes a synthetic .tensors file. Exits 77 without a GPU.
#include "tz/engine/device_load.hpp"
#include "tz/engine/host_memory.hpp"
#include "tz/backends/file_source.hpp"
#include "tz/format/writer.hpp"
#include "tz/base/posix_io.hpp"

#include "gpu_load_options.hpp"
#include "hash_limit.hpp"
#include "host_limits.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using gpu_load_bench::mib;
using gpu_load_bench::options;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The limit: one ring's worth of pinned memory copied over and over in slot-sized pieces on the
// same streams a load uses, all issued at once, then synchronized. GB/s, median of runs.
double pinned_limit_gbps(const options& o, tz::cuda::uploader& up) {
  const std::size_t ring = o.slot_count * o.slot_bytes;
  auto host = tz::unwrap(tz::cuda::alloc_pinned(ring));
  std::memset(host.data(), 1, ring);
  auto dev = tz::unwrap(tz::cuda::alloc_device(o.device, ring));
  const std::size_t total = std::max(o.size_bytes, ring);
  std::vector<double> gbps;
  for (int run = 0; run < o.runs + 1; ++run) {  // run 0 warms up
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t done = 0; done < total; done += o.slot_bytes) {
      const std::size_t off = done % ring;
      tz::unwrap(up.upload(host.bytes().subspan(off, o.slot_bytes), dev, off));
    }
    tz::unwrap(up.synchronize());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (run > 0) gbps.push_back(static_cast<double>(total) / s / 1e9);
  }
  return median(gbps);
}

// Host-to-device copies of one ring's worth of pinned memory, over and over, on a thread of its
// own until stopped: the DMA traffic a load adds to the host's memory while its readers copy.
class background_dma {
 public:
  background_dma(const options& o, tz::cuda::uploader& up)
      : o_(o), up_(up), host_(tz::unwrap(tz::cuda::alloc_pinned(o.slot_count * o.slot_bytes))),
        dev_(tz::unwrap(tz::cuda::alloc_device(o.device, o.slot_count * o.slot_bytes))) {
    std::memset(host_.data(), 2, host_.size_bytes());
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        for (std::size_t off = 0; off < host_.size_bytes(); off += o_.slot_bytes) {
          tz::unwrap(up_.upload(host_.bytes().subspan(off, o_.slot_bytes), dev_, off));
        }
        tz::unwrap(up_.synchronize());
        bytes_ += host_.size_bytes();
      }
    });
  }
  ~background_dma() { stop(); }
  // Stops and returns the bytes copied so far.
  std::uint64_t stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return bytes_;
  }
  std::uint64_t bytes() const { return bytes_.load(); }

 private:
  const options& o_;
  tz::cuda::uploader& up_;
  tz::cuda::pinned_buffer host_;
  tz::cuda::device_buffer dev_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> bytes_{0};
  std::thread thread_;
};

enum class read_how { pread, mmap_copy };

struct read_ref {
  double gbps = 0;      // file bytes into the slots
  double dma_gbps = 0;  // concurrent host-to-device copies (with `dma` only)
};

// The second limit: how fast `threads` threads move the file in slot-sized pieces into their own
// pinned slot, with no upload of it: pread (O_DIRECT after dropping the file's pages when cold),
// or a mapping of the page cache populated piece by piece (MADV_POPULATE_READ) and memcpy. With
// `dma`, pinned-to-device copies of another ring-sized buffer run meanwhile, as during a load.
// GB/s, median of runs.
read_ref read_limit_gbps(const options& o, unsigned threads, bool cold, read_how how = read_how::pread,
                         tz::cuda::uploader* dma = nullptr) {
  auto src = tz::unwrap(tz::file_source::open(o.file));
  const std::uint64_t size = src->size_bytes();
  std::vector<tz::cuda::pinned_buffer> slots;
  for (unsigned t = 0; t < threads; ++t) slots.push_back(tz::unwrap(tz::cuda::alloc_pinned(o.slot_bytes)));
  std::vector<double> gbps, dma_gbps;
  for (int run = 0; run < o.runs + (cold ? 0 : 1); ++run) {
    if (cold) tz::unwrap(src->drop_cache());
    const int fd = ::open(o.file.c_str(), O_RDONLY | (cold ? O_DIRECT : 0));
    if (fd < 0) return {};
    const std::byte* map = nullptr;
    if (how == read_how::mmap_copy) {
      void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      if (m == MAP_FAILED) return {};
      map = static_cast<const std::byte*>(m);
    }
    std::optional<background_dma> traffic;
    if (dma != nullptr) traffic.emplace(o, *dma);
    const std::uint64_t dma_before = traffic ? traffic->bytes() : 0;
    std::atomic<std::uint64_t> next{0};
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (std::uint64_t off; (off = next.fetch_add(o.slot_bytes)) < size;) {
          const std::size_t n = std::min<std::uint64_t>(o.slot_bytes, size - off);
          if (map != nullptr) {
            ::madvise(const_cast<std::byte*>(map + off), n, MADV_POPULATE_READ);
            std::memcpy(slots[t].data(), map + off, n);
          } else if (::pread(fd, slots[t].data(), o.slot_bytes, static_cast<off_t>(off)) < 0) {
            return;
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (traffic) {
      const std::uint64_t moved = traffic->bytes() - dma_before;
      traffic->stop();
      if (cold || run > 0) dma_gbps.push_back(static_cast<double>(moved) / s / 1e9);
    }
    if (map != nullptr) ::munmap(const_cast<std::byte*>(map), size);
    ::close(fd);
    if (cold || run > 0) gbps.push_back(static_cast<double>(size) / s / 1e9);
  }
  return {median(gbps), dma_gbps.empty() ? 0 : median(dma_gbps)};
}

// The plainest pipeline on the same resources, without the engine: `threads` threads share the
// ring's slots (thread t owns slots t, t + threads, ...), and each preads the next slot-sized piece of
// the file into a free slot of its own, uploads it with cudaMemcpyAsync to the same offset of one
// file-sized device buffer and, once all its slots are in flight, waits for its oldest copy. No
// coroutines, plan, lease ring or completion threads: the gap between this and a load is what the
// engine costs; the gap between this and the limit is what the host costs. GB/s, median of runs.
double pipeline_gbps(const options& o, tz::cuda::uploader& up, unsigned threads) {
  auto src = tz::unwrap(tz::file_source::open(o.file));
  const std::uint64_t size = src->size_bytes();
  const int fd = ::open(o.file.c_str(), O_RDONLY);
  if (fd < 0) return 0;
  threads = std::max<unsigned>(1, std::min<std::size_t>(threads, o.slot_count));
  std::vector<tz::cuda::pinned_buffer> slots;
  for (std::size_t i = 0; i < o.slot_count; ++i) slots.push_back(tz::unwrap(tz::cuda::alloc_pinned(o.slot_bytes)));
  std::vector<double> gbps;
  std::atomic<bool> failed{false};
  for (int run = 0; run < o.runs + 1; ++run) {  // run 0 warms up
    std::atomic<std::uint64_t> next{0};
    const auto t0 = std::chrono::steady_clock::now();
    auto dev = tz::unwrap(tz::cuda::alloc_device(o.device, size));  // timed, as a load's destination is
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        std::vector<std::size_t> mine;
        for (std::size_t i = t; i < o.slot_count; i += threads) mine.push_back(i);
        std::vector<tz::cuda::upload_ticket> in_flight(mine.size());
        for (std::size_t k = 0;; ++k) {
          const std::size_t slot = k % mine.size();
          if (!up.wait(in_flight[slot])) failed = true;  // the slot's previous copy (empty: done)
          const std::uint64_t off = next.fetch_add(o.slot_bytes);
          if (off >= size) break;
          const std::size_t n = std::min<std::uint64_t>(o.slot_bytes, size - off);
          auto& buffer = slots[mine[slot]];
          if (::pread(fd, buffer.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) {
            failed = true;
            break;
          }
          auto ticket = up.upload(buffer.bytes().first(n), dev, off);
          if (!ticket) {
            failed = true;
            break;
          }
          in_flight[slot] = std::move(*ticket);
        }
        for (auto& ticket : in_flight) static_cast<void>(up.wait(ticket));
      });
    }
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (run > 0) gbps.push_back(static_cast<double>(size) / s / 1e9);
  }
  ::close(fd);
  if (failed) {
    std::fprintf(stderr, "gpu_load_bench: the plain pipeline failed (read or upload)\n");
    return 0;
  }
  return median(gbps);
}

// A synthetic model: float32 tensors of tensor_bytes filling size_bytes.
std::string write_synthetic(const options& o) {
  const std::string path = "/tmp/gpu_load_bench_" + std::to_string(::getpid()) + ".tensors";
  auto w = tz::unwrap(tz::format::tensor_writer::create(path));
  std::vector<float> v(o.tensor_bytes / 4);
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(k % 1000);
  const auto f32 = tz::unwrap(tz::format::dtype_from_torch("torch.float32"));
  for (std::size_t i = 0; i * o.tensor_bytes < o.size_bytes; ++i) {
    tz::format::tensor_write t;
    t.path = tz::format::plain_path("layer" + std::to_string(i) + ".weight");
    t.dtype = f32;
    t.shape = {v.size()};
    t.data = std::as_bytes(std::span<const float>(v));
    tz::unwrap(w.write(t));
  }
  tz::unwrap(w.close());
  return path;
}

struct run_result {
  double gbps = 0;
  tz::load_timings timings;
  std::uint64_t pinned_max = 0;
  std::uint64_t ring = 0;
};

// Loads the whole file `runs` times (after one untimed load) and keeps the median run. Every load
// takes its ring from `ctx`'s pool; with `fresh`, each load gets a context of its own instead
// (new streams, completion threads and pinned ring: what a load paid before contexts lived
// across loads, and what a process's first load pays).
run_result measure(const options& o, tz::scheduler& sched, tz::device_context& ctx, bool cold, bool fresh = false) {
  auto src = tz::unwrap(tz::file_source::open(o.file, {.direct = cold, .async_punt = !cold && o.async_punt}));
  auto opened = tz::unwrap(tz::loader::open(sched, src));
  std::vector<run_result> runs;
  for (int run = 0; run < o.runs + (cold ? 0 : 1); ++run) {
    if (cold) tz::unwrap(src->drop_cache());
    tz::device_load_options lo;
    lo.slot_count = o.slot_count;
    lo.slot_bytes = o.slot_bytes;
    lo.readers = o.readers;
    lo.verify = o.verify;
    lo.crc_on_device = o.crc_on_device;
    lo.verify_longest_first = o.longest_first;
    std::unique_ptr<tz::device_context> own;
    const auto t0 = std::chrono::steady_clock::now();
    if (fresh) own = tz::unwrap(tz::device_context::create(o.device, o.streams));
    auto t = tz::unwrap(tz::load_to_device(sched, fresh ? *own : ctx, opened, {}, lo));
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!cold && run == 0) continue;  // the warm-up load fills the page cache
    const auto data = static_cast<double>(std::max<std::uint64_t>(1, t.data_bytes()));
    // A fresh context's own creation counts: the rate is over the whole call.
    runs.push_back({data / (fresh ? wall_s : t.timings().total_s) / 1e9, t.timings(), t.pinned_bytes_max(),
                    t.ring_bytes()});
  }
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.gbps < b.gbps; });
  return runs[runs.size() / 2];
}


// The N-core hashing limit of the file's tensors from memory (hash_limit.hpp): what a verified
// load can reach at best on this host. The better of the split and fused schedules, each the
// median of three runs, in data bytes per second.
// With sha_only, SHA-256 alone (hash_sha256_only): the host's share when the CRC32s run on the GPU.
double hash_limit_gbps(const options& o, tz::scheduler& sched, bool sha_only = false) {
  auto file = tz::unwrap(tz::mapped_file::open(o.file));
  auto opened = tz::unwrap(tz::loader::open(sched, tz::unwrap(tz::file_source::open(o.file))));
  std::vector<tz::format::tensor_header> headers;
  const auto tensors = tz::bench::hashed_tensors(opened.index(), file.bytes(), headers);
  std::uint64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.data.size();
  double best = 0;
  for (int schedule = sha_only ? 2 : 0; schedule < (sha_only ? 3 : 2); ++schedule) {
    std::vector<double> runs;
    for (int k = 0; k < 3; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      std::size_t bad = 0;
      if (schedule == 2) bad = tz::bench::hash_sha256_only(tensors, sched.thread_count());
      else bad = (schedule == 0 ? tz::bench::hash_split(tensors, sched.thread_count())
                                : tz::bench::hash_fused(tensors, sched.thread_count())).mismatches(tensors);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (bad != 0) throw std::runtime_error("hash limit: stored hashes do not match");
      runs.push_back(static_cast<double>(bytes) / s / 1e9);
    }
    std::sort(runs.begin(), runs.end());
    best = std::max(best, runs[1]);
  }
  return best;
}


void print(const char* what, const run_result& r, double limit) {
  const auto& t = r.timings;
  std::printf("%-12s %7.2f GB/s  %.3fx limit | total %.3f s, prepare %.3f s | worker-s: read %.3f verify %.3f "
              "decrypt %.3f upload %.3f wait %.3f | pinned max %.0f MiB (ring %.0f MiB)\n",
              what, r.gbps, r.gbps / limit, t.total_s, t.prepare_s, t.read_s, t.verify_s, t.decrypt_s, t.upload_s,
              t.wait_s, static_cast<double>(r.pinned_max) / mib, static_cast<double>(r.ring) / mib);
}

// The references every load is measured against, measured and printed first.
struct limits {
  double copy = 0;   // pinned cudaMemcpyAsync
  double bound = 0;  // min(copy, what three passes over host memory allow)
  double hash = 0;   // CRC32 + SHA-256 on every thread (--verify)
  double sha = 0;    // SHA-256 alone (--verify)
};

limits measure_limits(const options& o, tz::scheduler& sched, tz::cuda::uploader& up) {
  limits l;
  l.copy = pinned_limit_gbps(o, up);
  std::printf("limit %7.2f GB/s  pinned cudaMemcpyAsync, %zu MiB pieces over %d streams\n", l.copy, o.slot_bytes / mib,
              o.streams);
  const double copy = tz::bench::memcpy_gbps(sched.thread_count(), o.size_bytes);
  l.bound = std::min(l.copy, copy * 2 / 3);
  std::printf("mem   %7.2f GB/s  host memcpy on %u threads (a read and a write per byte); three passes per loaded "
              "byte allow %.2f GB/s; bound min(limit, that) %.2f GB/s\n", copy, sched.thread_count(), copy * 2 / 3, l.bound);
  const auto [host_alloc_ms, register_ms] = tz::bench::pin_ms(o.slot_count * o.slot_bytes);
  std::printf("pin   %.1f ms cudaHostAlloc, %.1f ms huge pages + populate + cudaHostRegister (the ring's way), "
              "%zu MiB (alloc and free)\n", host_alloc_ms, register_ms, o.slot_count * o.slot_bytes / mib);
  if (o.verify) {
    l.hash = hash_limit_gbps(o, sched);
    std::printf("hash  %7.2f GB/s  N-core hash limit: every tensor's CRC32 + SHA-256 from memory on %u threads\n",
                l.hash, sched.thread_count());
    l.sha = hash_limit_gbps(o, sched, true);
    std::printf("sha   %7.2f GB/s  SHA-256 alone on %u threads (the host's hashing when the GPU takes the CRC32s)\n",
                l.sha, sched.thread_count());
  }
  return l;
}

// The host side's own limits: reads into pinned slots, and with --references the same (and mapped
// copies) while DMA runs.
void print_read_references(const options& o, unsigned n, tz::cuda::uploader& up) {
  const double read_warm = read_limit_gbps(o, n, false).gbps;
  std::printf("read  %7.2f GB/s  page cache -> pinned slots, pread on %u threads, no upload\n", read_warm, n);
  if (!o.references) return;
  const auto busy = read_limit_gbps(o, n, false, read_how::pread, &up);
  std::printf("read  %7.2f GB/s  the same while pinned copies of another buffer run (at %.2f GB/s)\n", busy.gbps,
              busy.dma_gbps);
  const double mapped = read_limit_gbps(o, n, false, read_how::mmap_copy).gbps;
  std::printf("mmap  %7.2f GB/s  page cache mapped, populated and memcpy'd into pinned slots on %u threads\n", mapped, n);
  const auto mapped_busy = read_limit_gbps(o, n, false, read_how::mmap_copy, &up);
  std::printf("mmap  %7.2f GB/s  the same while pinned copies of another buffer run (at %.2f GB/s)\n",
              mapped_busy.gbps, mapped_busy.dma_gbps);
}

// The same reader count a load uses by default (device_load.cpp).
unsigned readers_for(const options& c, unsigned threads) {
  return c.readers != 0 ? c.readers : std::max<unsigned>(1, std::min<std::size_t>(2 * threads, c.slot_count * 3 / 4));
}

// The default ring, warm, against its plain pipeline, the bound and (verified) the hash limits;
// then a load with a context of its own, and (verified) every hash on the host.
void measure_default_ring(const options& o, tz::scheduler& sched, tz::device_context& ctx, const limits& l) {
  const unsigned readers = readers_for(o, sched.thread_count());
  const double pipe = pipeline_gbps(o, ctx.uploader(), readers);
  std::printf("pipe  %7.2f GB/s  %.3fx limit: %u threads pread into their own slots of the ring + cudaMemcpyAsync, "
              "no engine\n", pipe, pipe / l.copy, readers);
  const run_result warm = measure(o, sched, ctx, false);
  print("warm ring", warm, l.copy);
  std::printf("            %.3fx the plain pipeline, %.3fx the bound\n", pipe > 0 ? warm.gbps / pipe : 0.0,
              warm.gbps / l.bound);
  if (o.verify)
    std::printf("            %.3fx the N-core hash limit, %.3fx SHA-256 alone\n", warm.gbps / l.hash, warm.gbps / l.sha);
  const run_result fresh = measure(o, sched, ctx, false, true);
  print("fresh ctx", fresh, l.copy);
  std::printf("            %.3fx the warm ring (a context of its own per load: streams, threads, ring)\n",
              warm.gbps > 0 ? fresh.gbps / warm.gbps : 0.0);
  if (o.verify) {  // the same verified load with every hash on the host's cores, for comparison
    options h = o;
    h.crc_on_device = false;
    const run_result host = measure(h, sched, ctx, false);
    print("host CRC32", host, l.copy);
    std::printf("            %.3fx the N-core hash limit, %.3fx the warm ring (CRC32s on the GPU)\n",
                host.gbps / l.hash, warm.gbps > 0 ? host.gbps / warm.gbps : 0.0);
    options f = o;  // and with the split tensors started in file order instead of longest first
    f.longest_first = false;
    const run_result file_order = measure(f, sched, ctx, false);
    print("file order", file_order, l.copy);
    std::printf("            %.3fx the N-core hash limit, %.3fx the warm ring (longest tensors first)\n",
                file_order.gbps / l.hash, warm.gbps > 0 ? file_order.gbps / warm.gbps : 0.0);
  }
}

// --configs: more rings, each load against its own plain pipeline.
void measure_configs(const options& o, tz::scheduler& sched, tz::device_context& ctx, double limit) {
  for (const auto& config : o.configs) {
    options c = o;
    c.slot_count = config.slot_count;
    c.slot_bytes = config.slot_bytes;
    c.readers = config.readers;
    const unsigned readers = readers_for(c, sched.thread_count());
    const double pipe = pipeline_gbps(c, ctx.uploader(), readers);
    const run_result warm = measure(c, sched, ctx, false);
    std::printf("ring %3zu x %2zu MiB, %2u readers: pipe %7.2f GB/s %.3fx limit | load %7.2f GB/s %.3fx limit, %.3fx pipe "
                "| prepare %.3f s, read %.3f, wait %.3f worker-s\n",
                c.slot_count, c.slot_bytes / mib, readers, pipe, pipe / limit, warm.gbps, warm.gbps / limit,
                pipe > 0 ? warm.gbps / pipe : 0.0, warm.timings.prepare_s, warm.timings.read_s, warm.timings.wait_s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  options o = gpu_load_bench::parse(argc, argv);
  if (!tz::cuda::available()) {
    std::printf("gpu_load_bench: no CUDA device, skipped\n");
    return 77;
  }
  const bool synthetic = o.file.empty();
  if (synthetic) o.file = write_synthetic(o);
  tz::scheduler sched(o.threads);
  auto ctx = tz::unwrap(tz::device_context::create(o.device, o.streams));
  auto info = tz::unwrap(tz::cuda::describe_device(o.device));
  std::printf("gpu_load_bench: %s, file %s, %u worker threads, %d streams, ring %zu x %zu MiB, readers %s, %d runs%s\n",
              info.name.c_str(), o.file.c_str(), sched.thread_count(), o.streams, o.slot_count, o.slot_bytes / mib,
              o.readers ? std::to_string(o.readers).c_str() : "auto", o.runs, o.verify ? ", verified" : "");
  const limits l = measure_limits(o, sched, ctx->uploader());
  print_read_references(o, sched.thread_count(), ctx->uploader());
  measure_default_ring(o, sched, *ctx, l);
  measure_configs(o, sched, *ctx, l.copy);
  if (o.cold) {
    const double read_cold = read_limit_gbps(o, sched.thread_count(), true).gbps;
    std::printf("read  %7.2f GB/s  disk -> pinned slots, O_DIRECT pread on %u threads, no upload\n", read_cold,
                sched.thread_count());
    print("cold ring", measure(o, sched, *ctx, true), l.copy);
  }
  if (synthetic && !o.keep) std::remove(o.file.c_str());
  return 0;
}

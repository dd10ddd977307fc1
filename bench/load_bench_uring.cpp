// Question: which io_uring arrangement copies page-cache reads fastest: Asio's random_access_file
// (one io_context per thread), raw liburing with one ring per thread, or one ring punting every
// read to io-wq with IOSQE_ASYNC? Reads FILE (warm) into pre-faulted memory; medians of runs.
// Its own executable: BOOST_ASIO_HAS_IO_URING changes Asio's internals, so it must not be mixed
// with TUs built without it.
#define BOOST_ASIO_HAS_IO_URING 1
#include <boost/asio/io_context.hpp>
#include <boost/asio/random_access_file.hpp>

#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t chunk_bytes = 16 << 20;
constexpr unsigned depth = 2;  // reads in flight per thread

struct job {
  std::byte* dst;
  std::size_t begin, end;  // file range of this thread
};

std::vector<job> split(std::byte* dst, std::size_t size, unsigned threads) {
  std::vector<job> jobs;
  std::size_t share = (size / threads + chunk_bytes - 1) / chunk_bytes * chunk_bytes;
  for (unsigned t = 0; t < threads; ++t) {
    std::size_t b = std::min(size, t * share);
    jobs.push_back({dst, b, std::min(size, b + share)});
  }
  return jobs;
}

// Asio: one io_context + random_access_file per thread, `depth` chained async reads each.
void asio_thread(const char* path, job j) {
  boost::asio::io_context ctx(1);
  boost::asio::random_access_file f(ctx, path, boost::asio::random_access_file::read_only);
  std::size_t next = j.begin;
  std::function<void(std::size_t)> issue = [&](std::size_t off) {
    std::size_t n = std::min(chunk_bytes, j.end - off);
    f.async_read_some_at(off, boost::asio::buffer(j.dst + off, n), [&, off, n](auto ec, std::size_t got) {
      if (ec) std::abort();
      if (got < n) return issue(off + got);  // short read: the rest of this chunk
      if (next < j.end) {
        std::size_t o = next;
        next += chunk_bytes;
        issue(o);
      }
    });
  };
  for (unsigned i = 0; i < depth && next < j.end; ++i, next += chunk_bytes) issue(next);
  ctx.run();
}

// Raw liburing: one ring per thread; `flags` may be IOSQE_ASYNC.
void uring_thread(int fd, job j, unsigned qd, unsigned flags) {
  io_uring ring;
  if (io_uring_queue_init(64, &ring, 0) < 0) std::abort();
  std::size_t next = j.begin;
  unsigned inflight = 0;
  auto issue = [&](std::size_t off, std::size_t n) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_read(sqe, fd, j.dst + off, static_cast<unsigned>(n), off);
    io_uring_sqe_set_flags(sqe, flags);
    sqe->user_data = off | (static_cast<std::uint64_t>(n) << 40);
    ++inflight;
  };
  for (; inflight < qd && next < j.end; next += chunk_bytes) issue(next, std::min(chunk_bytes, j.end - next));
  io_uring_submit(&ring);
  while (inflight > 0) {
    io_uring_cqe* cqe;
    if (io_uring_wait_cqe(&ring, &cqe) < 0) std::abort();
    std::uint64_t off = cqe->user_data & ((1ull << 40) - 1), n = cqe->user_data >> 40;
    int res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    --inflight;
    if (res < 0) std::abort();
    if (static_cast<std::uint64_t>(res) < n) issue(off + res, n - res);
    else if (next < j.end) {
      issue(next, std::min(chunk_bytes, j.end - next));
      next += chunk_bytes;
    }
    io_uring_submit(&ring);
  }
  io_uring_queue_exit(&ring);
}

double run(std::size_t size, const std::function<void()>& fn, int runs) {
  std::vector<double> v;
  for (int r = 0; r < runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    v.push_back(size / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: load_bench_uring FILE [runs]\n");
    return 2;
  }
  const char* path = argv[1];
  int runs = argc > 2 ? std::atoi(argv[2]) : 5;
  int fd = ::open(path, O_RDONLY);
  std::size_t size = static_cast<std::size_t>(::lseek(fd, 0, SEEK_END));
  auto* dst = static_cast<std::byte*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  auto threaded = [&](unsigned threads, auto body) {
    return [&, threads, body] {
      std::vector<std::thread> pool;
      for (const job& j : split(dst, size, threads)) pool.emplace_back(body, j);
      for (auto& t : pool) t.join();
    };
  };
  run(size, threaded(cores, [&](job j) { uring_thread(fd, j, depth, 0); }), 1);  // warm the cache
  std::printf("load_bench_uring: %s, %zu bytes, 16 MiB reads, %u in flight per thread, %d runs\n", path, size, depth, runs);
  for (unsigned t : {1u, cores}) {
    std::printf("  asio random_access_file, %u thread(s)     %6.2f GB/s\n", t,
                run(size, threaded(t, [&](job j) { asio_thread(path, j); }), runs));
    std::printf("  raw liburing ring per thread, %u thread(s) %6.2f GB/s\n", t,
                run(size, threaded(t, [&](job j) { uring_thread(fd, j, depth, 0); }), runs));
  }
  for (unsigned qd : {2u, 2 * cores, 8u}) {
    std::printf("  one ring, IOSQE_ASYNC, %u in flight         %6.2f GB/s\n", qd,
                run(size, threaded(1, [&](job j) { uring_thread(fd, j, qd, IOSQE_ASYNC); }), runs));
  }
  return 0;
}

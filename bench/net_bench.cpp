// Question: how close does tz's HTTP range source get to curl on the same server with the same
// number of connections? Reads URL [0, size) split over N connections into memory, R times, and
// runs N parallel ranged curls to /dev/null as the same-run reference.
// usage: net_bench URL [CONNECTIONS=4] [REPEAT=3] [--ca FILE]
#include "tz/backends/http_source.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

template <class T>
T run(tz::task<T> t) {
  boost::asio::io_context io;
  T out{};
  boost::asio::co_spawn(io, std::move(t), [&](std::exception_ptr e, T v) {
    if (e) std::rethrow_exception(e);
    out = std::move(v);
  });
  io.run();
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// N parallel curl range requests covering [0, size), timed by the shell.
double curl_seconds(const std::string& url, std::uint64_t size, int connections, const std::string& ca) {
  std::string script = "start=$(date +%s.%N); ";
  std::uint64_t chunk = size / connections;
  for (int i = 0; i < connections; ++i) {
    std::uint64_t first = i * chunk, last = i == connections - 1 ? size - 1 : first + chunk - 1;
    script += "curl -s -o /dev/null " + (ca.empty() ? std::string() : "--cacert " + ca + " ") + "-r " +
              std::to_string(first) + "-" + std::to_string(last) + " '" + url + "' & ";
  }
  script += "wait; end=$(date +%s.%N); echo \"$end - $start\" | bc";
  FILE* pipe = popen(("bash -c '" + [&] {
                       std::string quoted;
                       for (char c : script) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
                       return quoted;
                     }() + "'").c_str(), "r");
  if (!pipe) return 0;
  double secs = 0;
  if (std::fscanf(pipe, "%lf", &secs) != 1) secs = 0;
  pclose(pipe);
  return secs;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s URL [CONNECTIONS=4] [REPEAT=3] [--ca FILE]\n", argv[0]);
    return 2;
  }
  std::string url = argv[1];
  int connections = argc > 2 ? std::atoi(argv[2]) : 4;
  int repeat = argc > 3 ? std::atoi(argv[3]) : 3;
  tz::http_options options;
  if (argc > 5 && std::string(argv[4]) == "--ca") options.ca_file = argv[5];
  options.connections = static_cast<std::size_t>(connections);
  options.split_min_bytes = 1 << 20;
  auto source = tz::unwrap(tz::open_http_source(options, url));
  std::uint64_t size = tz::unwrap(run(source->size()));
  // Pre-faulted destination: page faults on fresh memory cost more than the copy (SERVERS.md §5).
  std::vector<std::byte> buffer(size);
  madvise(buffer.data(), buffer.size(), MADV_HUGEPAGE);
  std::printf("net_bench: %s, %.1f MiB, %d connections, %d repeats\n", url.c_str(), size / 1048576.0, connections, repeat);
  for (int i = 0; i < repeat; ++i) {
    std::span<std::byte> spans[] = {buffer};
    auto start = std::chrono::steady_clock::now();
    tz::unwrap(run(source->read(0, spans)));
    double tz_secs = seconds_since(start);
    double curl_secs = curl_seconds(url, size, connections, options.ca_file);
    std::printf("  run %d: tz %.2f GB/s   curl %.2f GB/s\n", i, size / tz_secs / 1e9, curl_secs > 0 ? size / curl_secs / 1e9 : 0.0);
  }
  return 0;
}

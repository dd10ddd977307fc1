// Question: does the loader over HTTP, S3 and Redis run at the speed of a raw reference client with the
// same number of connections to the same server, and how does it compare with the real tensorizer over HTTP?
// Per source, alternating in one run: ours = loader::open + load_into a pre-faulted buffer, N readers (one
// connection each, no sub-range splitting); reference = N parallel ranged `curl` to /dev/null (HTTP),
// N parallel `curl --aws-sigv4` (S3), N threads of hiredis GETRANGE (8 MiB pieces) into memory (Redis).
// GB/s = object bytes / wall seconds, median of REPEAT runs. The tensorizer peer (a python script) loads
// the HTTP URL with TensorDeserializer(device="cpu", num_readers=1,2,4,8) and reports its best median.
// usage: remote_load_bench [--http URL] [--s3 URL --s3-endpoint E] [--redis URL] [--connections N]
//                          [--repeat R] [--range-mib M] [--peer tensorizer_peer.py] [--json FILE]
// (S3 keys: AWS_ACCESS_KEY_ID/SECRET). --json also writes every run for bench/charts.py (bench_json.hpp).
#include "bench_json.hpp"
#include "tz/backends/http_source.hpp"
#include "tz/engine/loader.hpp"
#include "tz/backends/redis_source.hpp"
#include "tz/backends/s3.hpp"
#include "tz/backends/uri.hpp"

#include <hiredis/hiredis.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct config {
  std::string http, s3, s3_endpoint, redis, peer, json;
  unsigned connections = 4;
  int repeat = 5;
  std::uint64_t range_bytes = 0;  // the loader's largest read; 0 = its default
};

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs a shell command, returns its first line of output as a number (0 on failure).
double shell_number(const std::string& command) {
  FILE* pipe = popen(("bash -c " + shell_quote(command)).c_str(), "r");
  if (!pipe) return 0;
  double value = 0;
  if (std::fscanf(pipe, "%lf", &value) != 1) value = 0;
  pclose(pipe);
  return value;
}

// Runs a shell command, returns every number it prints (whitespace-separated).
std::vector<double> shell_numbers(const std::string& command) {
  FILE* pipe = popen(("bash -c " + shell_quote(command)).c_str(), "r");
  if (!pipe) return {};
  std::vector<double> out;
  for (double value = 0; std::fscanf(pipe, "%lf", &value) == 1;) out.push_back(value);
  pclose(pipe);
  return out;
}

// N parallel ranged curls covering [0, size) to /dev/null, timed in the shell; `extra` = curl options.
double curl_seconds(const std::string& url, std::uint64_t size, unsigned n, const std::string& extra) {
  std::string script = "start=$(date +%s.%N); ";
  const std::uint64_t chunk = size / n;
  for (unsigned i = 0; i < n; ++i) {
    const std::uint64_t first = i * chunk, last = i == n - 1 ? size - 1 : first + chunk - 1;
    script += "curl -sf -o /dev/null " + extra + " -r " + std::to_string(first) + "-" + std::to_string(last) + " " +
              shell_quote(url) + " & ";
  }
  script += "fails=0; for j in $(jobs -p); do wait $j || fails=1; done; end=$(date +%s.%N); "
            "[ $fails = 0 ] && echo \"$end - $start\" | bc || echo 0";
  return shell_number(script);
}

// Our side: open the index, then load every tensor into `buffer` (pre-faulted, reused across runs).
double ours_seconds(tz::scheduler& sched, const std::function<std::shared_ptr<tz::byte_source>()>& open,
                    unsigned readers, std::uint64_t range_bytes, std::vector<std::byte>& buffer) {
  const auto start = clock_type::now();
  auto l = tz::loader::open_or_throw(sched, open());
  std::uint64_t total = 0;
  for (const auto& e : l.index().tensors) total += e.deserialized_bytes;
  if (buffer.size() < total) buffer.resize(total, std::byte{1});  // first run only: faults once
  std::vector<tz::tensor_destination> dst;
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < l.index().tensors.size(); ++i) {
    const auto n = l.index().tensors[i].deserialized_bytes;
    dst.push_back({i, std::span(buffer).subspan(at, n)});
    at += n;
  }
  tz::load_options o;
  o.readers = readers;
  o.range_bytes = range_bytes;
  tz::unwrap(l.load_into(sched, std::move(dst), o));
  return seconds_since(start);
}

// The raw Redis reference: SCAN + STRLEN for the key list, then `n` threads, one hiredis connection
// each, GETRANGE 8 MiB pieces of their share of the bytes into memory.
struct redis_piece {
  std::string key;
  std::uint64_t key_offset, at, length;
};

std::vector<redis_piece> redis_pieces(redisContext* c, const std::string& prefix, std::uint64_t& total) {
  std::map<std::uint64_t, std::string> keys;
  std::string cursor = "0";
  do {
    auto* r = static_cast<redisReply*>(redisCommand(c, "SCAN %s MATCH %b COUNT 1000", cursor.c_str(),
                                                    (prefix + ":*").data(), prefix.size() + 2));
    if (!r || r->type != REDIS_REPLY_ARRAY) throw std::runtime_error("SCAN failed");
    cursor = r->element[0]->str;
    for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
      std::string k(r->element[1]->element[i]->str, r->element[1]->element[i]->len);
      keys[std::stoull(k.substr(k.rfind(':') + 1))] = k;
    }
    freeReplyObject(r);
  } while (cursor != "0");
  std::vector<redis_piece> pieces;
  total = 0;
  for (const auto& [offset, key] : keys) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "STRLEN %b", key.data(), key.size()));
    const std::uint64_t len = r ? static_cast<std::uint64_t>(r->integer) : 0;
    if (r) freeReplyObject(r);
    for (std::uint64_t p = 0; p < len; p += 8ull << 20)
      pieces.push_back({key, p, offset + p, std::min<std::uint64_t>(8ull << 20, len - p)});
    total = std::max(total, offset + len);
  }
  return pieces;
}

double redis_raw_seconds(const tz::parsed_uri& uri, unsigned n, std::vector<std::byte>& buffer) {
  const auto start = clock_type::now();
  redisContext* c = redisConnect(uri.host.c_str(), uri.port);
  std::uint64_t total = 0;
  auto pieces = redis_pieces(c, uri.target, total);
  redisFree(c);
  if (buffer.size() < total) buffer.resize(total, std::byte{1});
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t)
    threads.emplace_back([&, t] {
      redisContext* ctx = redisConnect(uri.host.c_str(), uri.port);
      auto send = [&](std::size_t i) {
        const auto& p = pieces[i];
        redisAppendCommand(ctx, "GETRANGE %b %llu %llu", p.key.data(), p.key.size(),
                           static_cast<unsigned long long>(p.key_offset),
                           static_cast<unsigned long long>(p.key_offset + p.length - 1));
      };
      // Round-robin shares of the pieces, two commands in flight per connection.
      for (std::size_t i = t; i < pieces.size() && i < t + 2 * n; i += n) send(i);
      for (std::size_t i = t; i < pieces.size(); i += n) {
        void* reply = nullptr;
        if (redisGetReply(ctx, &reply) != REDIS_OK) break;
        auto* r = static_cast<redisReply*>(reply);
        if (r->type == REDIS_REPLY_STRING) std::memcpy(buffer.data() + pieces[i].at, r->str, r->len);
        freeReplyObject(r);
        if (i + 2 * n < pieces.size()) send(i + 2 * n);
      }
      redisFree(ctx);
    });
  for (auto& th : threads) th.join();
  return seconds_since(start);
}

struct row {
  std::string what, reference;
  double ours_gbps, ref_gbps;
  tz::bench::series ours_runs, ref_runs;
};

// CPU seconds (user + system) this process, or its waited-for children, have used so far.
double cpu_seconds(int who) {
  rusage u{};
  ::getrusage(who, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

// Alternates ours and the reference `repeat` times; GB/s from the medians. Each run also prints
// the client's CPU seconds (ours: this process; the reference: its child processes, or this
// process for the in-process Redis reference): on a 2-core host the server gets what the client
// leaves.
row measure(const config& cfg, const std::string& what, const std::string& ref_name, std::uint64_t size,
            const std::function<double()>& ours, const std::function<double()>& reference) {
  std::vector<double> a, b;
  const int ref_who = what == "redis" ? RUSAGE_SELF : RUSAGE_CHILDREN;
  for (int i = 0; i < cfg.repeat; ++i) {
    const double c0 = cpu_seconds(RUSAGE_SELF);
    a.push_back(ours());
    const double c1 = cpu_seconds(RUSAGE_SELF), r0 = cpu_seconds(ref_who);
    b.push_back(reference());
    const double r1 = cpu_seconds(ref_who);
    std::printf("  %-6s run %d: ours %.2f GB/s (client CPU %.2f s), %s %.2f GB/s (client CPU %.2f s)\n", what.c_str(),
                i, size / a.back() / 1e9, c1 - c0, ref_name.c_str(), b.back() > 0 ? size / b.back() / 1e9 : 0.0,
                r1 - r0);
  }
  const double mb = median(b);
  tz::bench::series ours_runs, ref_runs;
  for (double s : a) ours_runs.gbps.push_back(size / s / 1e9);
  for (double s : b) ref_runs.gbps.push_back(s > 0 ? size / s / 1e9 : 0);
  ours_runs.printed_median = size / median(a) / 1e9;  // from the median seconds, as printed
  ref_runs.printed_median = mb > 0 ? size / mb / 1e9 : 0;
  return {what, ref_name, ours_runs.printed_median, ref_runs.printed_median, ours_runs, ref_runs};
}

std::uint64_t source_size(tz::scheduler& sched, tz::byte_source& s) { return tz::unwrap(tz::run(sched, s.size())); }

config parse(int argc, char** argv) {
  config c;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--http") c.http = v;
    else if (k == "--s3") c.s3 = v;
    else if (k == "--s3-endpoint") c.s3_endpoint = v;
    else if (k == "--redis") c.redis = v;
    else if (k == "--connections") c.connections = static_cast<unsigned>(std::max(1, std::atoi(v.c_str())));
    else if (k == "--repeat") c.repeat = std::max(1, std::atoi(v.c_str()));
    else if (k == "--peer") c.peer = v;
    else if (k == "--json") c.json = v;
    else if (k == "--range-mib") c.range_bytes = std::strtoull(v.c_str(), nullptr, 10) << 20;
    else throw std::invalid_argument("unknown option " + k);
  }
  return c;
}

// The summary table, the tensorizer peer over HTTP, and --json (one panel per source).
int finish(const config& cfg, const std::vector<row>& rows, tz::bench::json_report& report) {
  const unsigned n = cfg.connections;
  std::printf("\n%-6s %-11s %10s %17s %10s %7s\n", "source", "connections", "ours GB/s", "reference", "ref GB/s", "ratio");
  for (const auto& r : rows)
    std::printf("%-6s %-11u %10.2f %17s %10.2f %6.2fx\n", r.what.c_str(), n, r.ours_gbps, r.reference.c_str(), r.ref_gbps,
                r.ref_gbps > 0 ? r.ours_gbps / r.ref_gbps : 0.0);
  const std::string conns = std::to_string(n) + " connections";
  for (const auto& r : rows) {
    const std::string group = r.what + ", " + conns;
    report.reference(group, r.reference, r.ref_runs);
    report.result(group, "ours (loader)", r.ours_runs, r.reference);
  }
  if (!cfg.peer.empty() && !cfg.http.empty() && !rows.empty()) {
    // The peer prints "RESULT <best median>" and "RESULT_RUNS <every run of that setting>".
    const auto v = shell_numbers("python3 " + shell_quote(cfg.peer) + " " + shell_quote(cfg.http) + " --runs " +
                                 std::to_string(cfg.repeat) +
                                 " --readers 1,2,4,8 2>/dev/null | sed -n 's/^RESULT //p; s/^RESULT_RUNS //p'");
    const double peer = v.empty() ? 0 : v.front();
    std::printf("http   vs tensorizer TensorDeserializer(url, num_readers=best): ours %.2f GB/s, tensorizer %.2f GB/s, %.2fx\n",
                rows.front().ours_gbps, peer, peer > 0 ? rows.front().ours_gbps / peer : 0.0);
    if (peer > 0) {
      const std::string group = "http: vs the real tensorizer", real = "real tensorizer";
      report.reference(group, real, {std::vector<double>(v.begin() + (v.size() > 1 ? 1 : 0), v.end()), peer},
                       "TensorDeserializer(url), best num_readers");
      report.result(group, "ours (loader)", rows.front().ours_runs, real);
    }
  }
  return cfg.json.empty() || report.write(cfg.json) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) try {
  tz::bench::json_report report("remote_load_bench", argc, argv);
  const config cfg = parse(argc, argv);
  tz::scheduler sched(2);
  std::vector<std::byte> buffer;
  std::vector<row> rows;
  const unsigned n = cfg.connections;
  std::printf("remote_load_bench: %u connections, median of %d runs\n", n, cfg.repeat);
  if (!cfg.http.empty()) {
    tz::http_options o;
    o.connections = 1;  // one connection per reader: N readers = N connections
    auto open = [&] { return std::shared_ptr<tz::byte_source>(tz::unwrap(tz::open_http_source(o, cfg.http))); };
    const auto size = source_size(sched, *open());
    report.set_size_bytes(size);
    rows.push_back(measure(cfg, "http", "curl", size, [&] { return ours_seconds(sched, open, n, cfg.range_bytes, buffer); },
                           [&] { return curl_seconds(cfg.http, size, n, ""); }));
  }
  if (!cfg.s3.empty()) {
    tz::s3_options o;
    o.endpoint = cfg.s3_endpoint;
    o.force_http = cfg.s3_endpoint.rfind("http://", 0) == 0;
    o.http.connections = 1;
    auto open = [&] { return std::shared_ptr<tz::byte_source>(tz::unwrap(tz::open_s3_source(o, cfg.s3))); };
    const auto size = source_size(sched, *open());
    report.set_size_bytes(size);
    const auto uri = tz::unwrap(tz::parse_uri(cfg.s3));
    const std::string url = cfg.s3_endpoint + "/" + uri.host + "/" + uri.target;
    const char* ak = std::getenv("AWS_ACCESS_KEY_ID");
    const char* sk = std::getenv("AWS_SECRET_ACCESS_KEY");
    const std::string sign = "--aws-sigv4 aws:amz:us-east-1:s3 --user " + shell_quote(std::string(ak ? ak : "") + ":" + (sk ? sk : "")) +
                             " -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD'";
    rows.push_back(measure(cfg, "s3", "curl-sigv4", size, [&] { return ours_seconds(sched, open, n, cfg.range_bytes, buffer); },
                           [&] { return curl_seconds(url, size, n, sign); }));
  }
  if (!cfg.redis.empty()) {
    tz::redis_options o;
    o.connections = n;
    auto open = [&] { return std::shared_ptr<tz::byte_source>(tz::unwrap(tz::open_redis_source(o, cfg.redis))); };
    const auto size = source_size(sched, *open());
    report.set_size_bytes(size);
    const auto uri = tz::unwrap(tz::parse_uri(cfg.redis));
    std::vector<std::byte> raw_buffer;
    rows.push_back(measure(cfg, "redis", "hiredis-GETRANGE", size, [&] { return ours_seconds(sched, open, n, cfg.range_bytes, buffer); },
                           [&] { return redis_raw_seconds(uri, n, raw_buffer); }));
  }
  return finish(cfg, rows, report);
} catch (const std::exception& e) {
  std::fprintf(stderr, "remote_load_bench: %s\n", e.what());
  return 1;
}

// The settings of the network sources (HTTP(S), S3 over HTTP, Redis): retries, time limits, TLS,
// connections. Kept apart from the sources' headers so that the clients and helpers below them
// (retry, the Redis client) and the layers above (sources/, the front ends) include settings only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tz {

// How many times and how patiently a request is retried after a connection reset/EOF, a timeout,
// a 5xx or a 429. Delays grow exponentially from backoff_initial up to backoff_max, with jitter.
// A request is one size() or read() of a source (with its sub-ranges each on their own clock).
struct retry_options {
  int attempts_max = 6;
  std::chrono::milliseconds backoff_initial{100};
  std::chrono::milliseconds backoff_max{5'000};
  // Bounds the retries in time: a budget for time lost to failed attempts, each of which spends
  // the time since data last moved (its fruitless waiting, then the backoff before the next). No
  // attempt starts, and no wait lasts, once it is gone. So a dead or silent server, or a transfer
  // that stalls (on every attempt, even after a little progress each time), is reported within
  // about this long whatever attempts_max says, while a slow transfer that keeps moving spends
  // nothing and is never cut. 0 = no bound (attempts_max and the timeouts alone).
  std::chrono::milliseconds give_up_after{20'000};
  // Hard limit on a whole request, retries included, that also cuts transfers still moving.
  // 0 = off (the default: how long a large read may take depends only on the bandwidth).
  std::chrono::milliseconds deadline{0};
};

struct http_options {
  // TLS: verification is on by default against the system store (which honours SSL_CERT_FILE and
  // SSL_CERT_DIR) or ca_file when given; verify_peer = false is the explicit insecure opt-out.
  std::string ca_file;
  bool verify_peer = true;
  // Per attempt (0 = none); retry.give_up_after and retry.deadline cut them shorter.
  std::chrono::milliseconds connect_timeout{5'000};      // name lookup; then TCP connect and TLS handshake
  std::chrono::milliseconds first_byte_timeout{10'000};  // request sent -> response header
  std::chrono::milliseconds stall_timeout{10'000};       // no body byte received (or sent) for this long
  retry_options retry;
  // A read of at least 2 * split_min_bytes is split into up to `connections` sub-ranges fetched in
  // parallel on separate connections.
  std::size_t connections = 4;
  std::uint64_t split_min_bytes = 8ull << 20;
  // The reads a load keeps in flight against this source when its caller leaves `readers` at 0
  // (byte_source::read_concurrency), each on a connection of its own. An object store starts every
  // response 10-80 ms late and caps a connection at 25-200 MB/s, so filling a link takes
  // bandwidth x latency in flight: through bench/shaping_proxy's cloud profile (20 ms, 25 MB/s per
  // connection) the engine's local-file default of two per worker got 0.35x of 32 parallel curl
  // ranges (issue 32). 64: the most the measurements below still gained from (cloud, 1 GiB, wall
  // GB/s, medians of 3: 32 reads 0.56-0.60, 48 0.65, 64 0.98, curl's 32 ranges 0.68); a load's
  // host memory does not grow with it, a device load's ring bounds it (device_load_options).
  // The table: docs/benchmarks.md#object-stores.
  unsigned reads_in_flight = 64;
  // A source whose first round trip (the size and the head, on opening) took less than
  // near_round_trip is near (a LAN, loopback): no latency to cover and no per-connection cap seen,
  // so it asks for near_reads_in_flight instead. 64 reads cost there: through bench/shaping_proxy's
  // loopback profile (1 GiB, wall GB/s against curl's best, medians of 5, same run) the CLI got
  // HTTP 0.91x / S3 0.86x with 64 and 1.09x / 0.98x with 16 (32: 0.90x / 0.98x). Object stores
  // answer 10-80 ms late, so they keep reads_in_flight. Either way a caller's readers win.
  unsigned near_reads_in_flight = 16;
  std::chrono::milliseconds near_round_trip{10};
  // The object's first bytes are fetched with its size (S3: in the same ranged GET; HTTP: a ranged
  // GET beside the HEAD), and reads inside them are served from memory: a .tensors file's magic,
  // header and index (73 + 256 KiB) then cost one round trip where they cost three more. 0: off.
  std::uint64_t head_fetch_bytes = 320ull << 10;
  std::vector<std::pair<std::string, std::string>> headers;  // extra request headers
  // Connect to this host instead of the URL's (the URL's host still goes into Host/SNI/checks).
  std::string connect_host;
};

struct redis_options {
  // Per attempt (0 = none), as for HTTP; retry.give_up_after and retry.deadline cut them shorter.
  std::chrono::milliseconds connect_timeout{5'000};      // name lookup; then TCP connect
  std::chrono::milliseconds first_byte_timeout{10'000};  // command sent -> first reply byte
  std::chrono::milliseconds stall_timeout{10'000};       // no reply byte received (or sent) for this long
  std::size_t connections = 4;                // blocking worker threads, one connection each
  std::uint64_t piece_bytes = 8ull << 20;     // GETRANGE / APPEND size: large bulk replies are slow in hiredis
  retry_options retry;
};

}  // namespace tz

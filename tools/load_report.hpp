// The one report of `tensorizer load`, host or device: the same bytes over the same interval.
#pragma once

#include "tz/engine/loader.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace tz::cli {

// One tensor's SHA-256 (hex), with its name as JSON and for people.
struct tensor_sha256 {
  std::string json_name, display_name, hex;
};

// What a load did. The rate is data_bytes / total_s: the stored tensor data read from the source,
// over the wall time from the load call until every tensor is in place and checked (host memory,
// or every copy to the device completed). Opening (reading the index) is reported apart, as open_s.
struct load_report {
  std::string file;
  bool safetensors = false;
  std::string destination;  // "host" or "cuda:N"
  std::size_t tensors = 0;
  std::uint64_t data_bytes = 0;
  load_timings timings;
  bool verify = false;
  bool direct = false;  // O_DIRECT reads
  unsigned threads = 0;
  unsigned readers = 0;
  std::uint64_t ring_bytes = 0;        // device loads: the pinned staging ring
  std::uint64_t pinned_max_bytes = 0;  // device loads: the most of it held at once, over every run (--repeat)
  std::string cache;                   // what the node-local cache did (tz::cache_status); "" if off
  std::vector<double> runs_gbps;       // load --repeat N: every run's rate (the report is the median run's)
  double setup_s = 0;    // the command's wall time before its first load: workers, the open and (device) the context
  double context_s = 0;  // device loads: making the GPU's context (streams, threads, pinned ring), beside the open
  std::vector<tensor_sha256> device_sha256;  // load --device --device-sha256: each tensor read back from the device
};

// Text for people, or one JSON object (json) on stdout.
void print_load_report(const load_report& r, bool json);

// The help lines that say how the rate is computed.
inline constexpr const char* load_rate_help =
    "  Rate: GB/s = stored tensor data bytes / seconds from the load call until every tensor is in\n"
    "  place and checked (open, the index read, is open_s and not included; nor is setup_s, all a\n"
    "  fresh process spends before its first load: workers, the open, a GPU's context). Stage times\n"
    "  other than prepare/transfer/total are worker-seconds summed over the readers.\n";

}  // namespace tz::cli

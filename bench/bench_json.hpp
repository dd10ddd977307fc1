// The benchmarks' common JSON output (`--json FILE`), read by bench/charts.py; the schema is in
// bench/README.md. Any bench records its measurements here as it goes: a result is one loader or
// reference in a group (one chart panel), with every run's GB/s, so a chart can show the spread and
// not only the median. Written with Boost.JSON (compiled once into tz::format, format/json.cpp),
// which escapes strings properly.
#pragma once

#include <boost/json.hpp>

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tz::bench {

// GB/s (1e9 bytes/s) of every run of one measurement.
struct series {
  std::vector<double> gbps;
  double printed_median = 0;  // when a bench prints a median of its own making (> 0): that one

  // The upper median, as most benches have always printed (the middle run of an odd count).
  double median() const {
    if (printed_median > 0) return printed_median;
    if (gbps.empty()) return 0;
    auto v = gbps;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
  double min() const { return gbps.empty() ? 0 : *std::min_element(gbps.begin(), gbps.end()); }
  double max() const { return gbps.empty() ? 0 : *std::max_element(gbps.begin(), gbps.end()); }
};

// This machine, for the chart's title: the numbers mean little without it.
inline boost::json::object machine_info() {
  boost::json::object m;
  m["nproc"] = std::max(1u, std::thread::hardware_concurrency());
  utsname u{};
  if (::uname(&u) == 0) m["kernel"] = std::string(u.sysname) + " " + u.release;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      m["cpu"] = line.substr(line.find(':') + 2);
      break;
    }
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) m["memory_bytes"] = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
  return m;
}

// UTC, ISO 8601, to the second.
inline std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

class json_report {
 public:
  // `argv` is recorded as the command that produced the file (the chart's caption), unless a
  // driver script that ran the bench set TZ_BENCH_COMMAND to its own command line.
  json_report(std::string bench, int argc, char** argv) : bench_(std::move(bench)), date_(utc_now()) {
    if (const char* driver = std::getenv("TZ_BENCH_COMMAND"); driver != nullptr && *driver != '\0') {
      command_ = driver;
      return;
    }
    for (int i = 0; i < argc; ++i) command_ += (i ? " " : "") + std::string(argv[i]);
  }

  void set_size_bytes(std::uint64_t bytes) { size_bytes_ = bytes; }
  // Anything else a reader may want (free-form; charts.py ignores it).
  void set_extra(const std::string& key, boost::json::value v) { extra_[key] = std::move(v); }

  // A same-run reference of `group` (drawn beside the loaders, in its own colour).
  void reference(const std::string& group, const std::string& name, const series& s, const std::string& note = {}) {
    results_.push_back({group, name, {}, note, true, s});
  }
  // A loader measured in `group`, compared with the reference named `reference`; empty: the
  // group's fastest reference by median (as "best raw" ratios are computed).
  void result(const std::string& group, const std::string& name, const series& s, const std::string& reference = {},
              const std::string& note = {}) {
    results_.push_back({group, name, reference, note, false, s});
  }

  boost::json::object to_json() const {
    boost::json::object o = extra_;
    o["schema"] = "tz-bench/1";
    o["bench"] = bench_;
    o["machine"] = machine_info();
    o["date"] = date_;
    o["command"] = command_;
    o["size_bytes"] = size_bytes_;
    boost::json::array results;
    for (const auto& r : results_) results.push_back(entry_json(r));
    o["results"] = std::move(results);
    return o;
  }

  // Writes the report to `path`; false (and a message on stderr) when it cannot.
  bool write(const std::string& path) const {
    std::ofstream out(path, std::ios::trunc);
    out << boost::json::serialize(to_json()) << "\n";
    out.close();
    if (!out) std::fprintf(stderr, "%s: cannot write %s\n", bench_.c_str(), path.c_str());
    return static_cast<bool>(out);
  }

 private:
  struct entry {
    std::string group, name, reference, note;
    bool is_reference;
    series s;
  };

  // The fastest reference of `group` by median; empty when it has none.
  std::string best_reference(const std::string& group) const {
    const entry* best = nullptr;
    for (const auto& r : results_)
      if (r.is_reference && r.group == group && (best == nullptr || r.s.median() > best->s.median())) best = &r;
    return best ? best->name : std::string();
  }

  boost::json::object entry_json(const entry& r) const {
    boost::json::object e;
    e["group"] = r.group;
    e["name"] = r.name;
    if (r.is_reference) {
      e["is_reference"] = true;
    } else {
      const std::string ref = r.reference.empty() ? best_reference(r.group) : r.reference;
      if (!ref.empty()) e["reference"] = ref;
    }
    if (!r.note.empty()) e["note"] = r.note;
    boost::json::array runs;
    for (double g : r.s.gbps) runs.push_back(g);
    e["runs_gbps"] = std::move(runs);
    e["median_gbps"] = r.s.median();
    e["min_gbps"] = r.s.min();
    e["max_gbps"] = r.s.max();
    return e;
  }

  std::string bench_, date_, command_;
  std::uint64_t size_bytes_ = 0;
  boost::json::object extra_;
  std::vector<entry> results_;
};

// Removes `--json FILE` from argv (so a bench's own parser never sees it); returns FILE or "".
inline std::string take_json_option(int& argc, char** argv) {
  std::string path;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--json" && i + 1 < argc) path = argv[++i];
    else argv[out++] = argv[i];
  }
  argc = out;
  return path;
}

}  // namespace tz::bench

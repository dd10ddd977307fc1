// gpu_load_bench's options and their parser (bench/gpu_load_bench.cpp says what it measures).
#pragma once

#include "tz/cuda/cuda.hpp"
#include "tz/engine/device_load.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace gpu_load_bench {

inline constexpr std::size_t mib = std::size_t{1} << 20;

struct options {
  std::string file;                   // empty: write a synthetic file
  std::size_t size_bytes = 4096 * mib;  // synthetic file size
  std::size_t tensor_bytes = 64 * mib;  // synthetic tensor size
  std::size_t slot_count = 16;
  std::size_t slot_bytes = 4 * mib;  // device_load_options' default
  unsigned readers = 0;
  unsigned threads = 0;
  int streams = 4;
  int runs = 5;
  int device = 0;
  bool cold = true;
  bool verify = false;
  bool crc_on_device = true;  // device_load_options::crc_on_device (verified loads)
  bool longest_first = true;  // load_common_options::verify_longest_first (verified loads)
  bool keep = false;         // keep the synthetic file (reuse it with --file)
  bool references = false;   // the extra host-side references (reads under DMA, mmap copies)
  bool async_punt = false;   // file_options::async_punt for the warm runs
  // --configs: more rings to compare in the same run, each against its own plain pipeline.
  struct ring_config {
    std::size_t slot_count = 0;
    std::size_t slot_bytes = 0;
    unsigned readers = 0;  // 0: automatic
  };
  std::vector<ring_config> configs;
};

[[noreturn]] inline void usage() {
  std::fprintf(stderr,
               "usage: gpu_load_bench [--smoke] [--file F] [--size-mib N] [--slots N] [--slot-mib N] [--readers N]\n"
               "                      [--threads N] [--streams N] [--runs N] [--device cuda:N] [--no-cold] [--verify]\n"
               "                      [--keep] [--references] [--async-punt]\n"
               "                      [--configs SLOTSxMIB[:READERS],...]   (more rings, e.g. 32x2,16x4:16,8x8)\n");
  std::exit(2);
}

inline options parse(int argc, char** argv) {
  options o;
  bool slots_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : (usage(), nullptr); };
    auto num = [&] { return std::strtoull(next(), nullptr, 10); };
    if (a == "--smoke") {  // CI: a second, so the benchmark cannot rot
      o.size_bytes = 48 * mib;
      o.tensor_bytes = 5 * mib;
      o.slot_count = 4;
      o.slot_bytes = 4 * mib;
      o.runs = 1;
    } else if (a == "--file") o.file = next();
    else if (a == "--size-mib") o.size_bytes = num() * mib;
    else if (a == "--slots") o.slot_count = num(), slots_given = true;
    else if (a == "--slot-mib") o.slot_bytes = num() * mib;
    else if (a == "--readers") o.readers = static_cast<unsigned>(num());
    else if (a == "--threads") o.threads = static_cast<unsigned>(num());
    else if (a == "--streams") o.streams = static_cast<int>(num());
    else if (a == "--runs") o.runs = std::max(1, static_cast<int>(num()));
    else if (a == "--device") o.device = tz::unwrap(tz::cuda::parse_device(next()));
    else if (a == "--no-cold") o.cold = false;
    else if (a == "--verify") o.verify = true;
    else if (a == "--keep") o.keep = true;
    else if (a == "--references") o.references = true;
    else if (a == "--async-punt") o.async_punt = true;
    else if (a == "--configs") {
      for (std::string_view list = next(); !list.empty();) {
        const auto comma = list.find(',');
        const std::string item(list.substr(0, comma));
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
        options::ring_config c;
        unsigned long long slots = 0, slot_mib = 0;
        unsigned readers = 0;
        const int got = std::sscanf(item.c_str(), "%llux%llu:%u", &slots, &slot_mib, &readers);
        if (got < 2 || slots == 0 || slot_mib == 0) usage();
        c.slot_count = slots;
        c.slot_bytes = slot_mib * mib;
        c.readers = got == 3 ? readers : 0;
        o.configs.push_back(c);
      }
    }
    else usage();
  }
  // A verified load's default ring is larger (device_load_options::slots()): more tensors hash at once.
  if (o.verify && !slots_given) o.slot_count = tz::device_load_options::verified_slot_count;
  return o;
}

}  // namespace gpu_load_bench

// A load's timeline for latency research: per range its read, check (decrypt, verify) and upload
// spans on the worker or copy that ran them, ring waits, the device memory's allocation and the
// first copy to complete, written as Chrome trace-event JSON (ui.perfetto.dev and chrome://tracing
// open it). A load records into one when load_common_options::trace is set.
#pragma once

#include "tz/base/error.hpp"

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tz {

class load_trace {
 public:
  using clock = std::chrono::steady_clock;

  // Times are microseconds since this object was made.
  load_trace() : t0_(clock::now()) {}

  // A span [begin, end) on the calling thread's track ("worker <tid>"); `range` names the plan
  // range (or -1), offset and bytes what it covered. Thread-safe, as are the others.
  void span(std::string_view name, clock::time_point begin, clock::time_point end, std::int64_t range = -1,
            std::uint64_t offset_bytes = 0, std::uint64_t length_bytes = 0);
  // A span that starts on one thread and ends on another (a copy from enqueue to completion),
  // drawn on an async track named `track`; `id` tells concurrent ones apart.
  void async_span(std::string_view name, std::string_view track, std::uint64_t id, clock::time_point begin,
                  clock::time_point end, std::uint64_t length_bytes = 0);
  // A point in time on the calling thread's track.
  void instant(std::string_view name, clock::time_point at);

  std::size_t event_count() const;

  // Writes the events as {"traceEvents": [...]} to `path`, atomically (a temporary file renamed
  // into place). Fails with errc::io naming the path.
  result<void> write(const std::string& path) const;

 private:
  struct event {
    std::string name;
    char phase = 'X';      // X: complete span, i: instant, b/e: async begin/end
    std::string track;     // async spans' category
    std::uint64_t id = 0;  // async spans
    std::int64_t tid = 0;
    double ts_us = 0, dur_us = 0;
    std::int64_t range = -1;
    std::uint64_t offset_bytes = 0, length_bytes = 0;
  };
  double micros(clock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - t0_).count();
  }
  void add(event e);

  clock::time_point t0_;
  mutable std::mutex mutex_;
  std::vector<event> events_;
};

}  // namespace tz

// load_trace: events collected under a mutex, written as Chrome trace-event JSON.
#include "tz/engine/load_trace.hpp"

#include "tz/base/posix_io.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <set>

namespace tz {

namespace {

std::int64_t this_thread_tid() { return static_cast<std::int64_t>(::syscall(SYS_gettid)); }

// A JSON string: the names here are ours (no control characters), but quotes and backslashes are
// escaped anyway.
std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string event_json(const auto& e) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "{\"ph\":\"%c\",\"pid\":1,\"tid\":%lld,\"ts\":%.3f", e.phase,
                static_cast<long long>(e.tid), e.ts_us);
  std::string out = buf + std::string(",\"name\":") + quoted(e.name);
  if (e.phase == 'X') {
    std::snprintf(buf, sizeof buf, ",\"dur\":%.3f", e.dur_us);
    out += buf;
  }
  if (e.phase == 'b' || e.phase == 'e') {
    std::snprintf(buf, sizeof buf, ",\"id\":%llu", static_cast<unsigned long long>(e.id));
    out += buf + std::string(",\"cat\":") + quoted(e.track);
  }
  if (e.phase == 'i') out += ",\"s\":\"t\"";
  if (e.range >= 0 || e.length_bytes > 0) {
    std::snprintf(buf, sizeof buf, ",\"args\":{\"range\":%lld,\"offset\":%llu,\"bytes\":%llu}",
                  static_cast<long long>(e.range), static_cast<unsigned long long>(e.offset_bytes),
                  static_cast<unsigned long long>(e.length_bytes));
    out += buf;
  }
  return out + "}";
}

}  // namespace

void load_trace::add(event e) {
  std::lock_guard lock(mutex_);
  events_.push_back(std::move(e));
}

void load_trace::span(std::string_view name, clock::time_point begin, clock::time_point end, std::int64_t range,
                      std::uint64_t offset_bytes, std::uint64_t length_bytes) {
  add({std::string(name), 'X', {}, 0, this_thread_tid(), micros(begin), micros(end) - micros(begin), range,
       offset_bytes, length_bytes});
}

void load_trace::async_span(std::string_view name, std::string_view track, std::uint64_t id, clock::time_point begin,
                            clock::time_point end, std::uint64_t length_bytes) {
  // Async events of one id form one row in the viewer; tid only decides where the arrows start.
  event b{std::string(name), 'b', std::string(track), id, 0, micros(begin), 0, -1, 0, length_bytes};
  event e = b;
  e.phase = 'e';
  e.ts_us = micros(end);
  std::lock_guard lock(mutex_);
  events_.push_back(std::move(b));
  events_.push_back(std::move(e));
}

void load_trace::instant(std::string_view name, clock::time_point at) {
  add({std::string(name), 'i', {}, 0, this_thread_tid(), micros(at), 0, -1, 0, 0});
}

std::size_t load_trace::event_count() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

result<void> load_trace::write(const std::string& path) const {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  {
    std::lock_guard lock(mutex_);
    std::set<std::int64_t> threads;
    for (std::size_t i = 0; i < events_.size(); ++i) {
      out += event_json(events_[i]) + ",\n";
      if (events_[i].phase != 'b' && events_[i].phase != 'e') threads.insert(events_[i].tid);
    }
    for (auto tid : threads)
      out += "{\"ph\":\"M\",\"pid\":1,\"tid\":" + std::to_string(tid) +
             ",\"name\":\"thread_name\",\"args\":{\"name\":\"worker " + std::to_string(tid) + "\"}},\n";
  }
  out += "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"tensorizer load\"}}\n]}\n";
  return write_file_atomically(path, std::as_bytes(std::span(out)));
}

}  // namespace tz

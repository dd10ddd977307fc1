// Shared by the suites on the CUDA emulation (tests/cuda_emulation): a case's clean settings, a
// load through a device context, what every case must leave behind, and the device bytes compared
// with what tz_test::write_floats wrote.
#pragma once

#include "tz/cuda_emulation.hpp"
#include "tz/engine/device_load.hpp"
#include "tz/backends/memory_source.hpp"

#include "float_model.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace emu_test {

namespace emu = tz::cuda::emulation;

// Every slot of `r` is free. A ring that was just made still pins slots 1.. on its own thread
// (lease_ring), so a bounded wait lets that finish; a lease that never came back still fails.
inline bool all_slots_free(const tz::lease_ring& r) {
  for (int i = 0; i < 5000 && r.available() < r.slot_count(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return r.available() == r.slot_count();
}

template <class T>
bool ok(const tz::result<T>& r) {
  if (!r) MESSAGE("unexpected error (" << tz::errc_name(r.error().code) << "): " << r.error().message);
  return r.has_value();
}

inline constexpr std::size_t kib = 1024;
inline constexpr std::size_t mib = 1024 * kib;

using tz_test::write_floats;

// Every tensor of `t` downloaded and compared with what write_floats wrote.
inline bool all_floats_match(const tz::device_tensors& t, std::size_t base_bytes) {
  for (std::size_t i = 0; i < t.size(); ++i) {
    std::vector<std::byte> got(t.size_bytes(i));
    if (!tz::cuda::download(t.buffer(), t.device_offset(i), got)) return false;
    if (!tz_test::floats_match(got, std::stoul(t.entry(i).name.substr(1)), base_bytes)) return false;
  }
  return true;
}

// Nothing allocated, no stream, no event: what every case must leave behind.
inline void check_nothing_alive() {
  const auto c = emu::snapshot();
  CHECK(c.device_allocations == 0);
  CHECK(c.host_allocations == 0);
  CHECK(c.registrations == 0);
  CHECK(c.streams == 0);
  CHECK(c.events == 0);
}

// Restores the default settings and a clean context when a case ends, even a failed one.
struct emulation_case {
  explicit emulation_case(emu::settings s = {}) {
    emu::clear_sticky_error();
    REQUIRE(emu::configure(s));
  }
  ~emulation_case() {
    emu::fail_copy(0);
    emu::skip_secretbox_launches(0);
    emu::clear_sticky_error();
    emu::configure({});
  }
};

inline tz::result<tz::device_tensors> load(tz::scheduler& sched, tz::device_context& ctx, std::shared_ptr<tz::byte_source> src,
                                    tz::device_load_options o) {
  auto l = tz::loader::open(sched, src);
  if (!l) return l.error();
  return tz::load_to_device(sched, ctx, *l, {}, std::move(o));
}

}  // namespace emu_test

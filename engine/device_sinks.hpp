// Private to engine/: what the two device sinks (device_load.cpp, partial_device.cpp) share: taking
// a slot of the pinned ring for a range (counting the wait and the most slots out at once), laying
// the range out in it, and waiting for their zero-fills.
#pragma once

#include "pipeline.hpp"

#include "tz/cuda/cuda.hpp"
#include "tz/engine/host_memory.hpp"

#include <atomic>
#include <cstddef>
#include <memory>

namespace tz {

// A slot of `ring` for one range; the wait goes to p's counters, the slots then out to `high_water`.
inline task<result<lease>> reserve_slot(lease_ring& ring, pipeline& p, std::atomic<std::size_t>& high_water) {
  const auto t0 = pipeline_clock::now();
  auto acquired = co_await ring.acquire();
  p.counters.wait_ns += nanoseconds_since(t0);
  const std::size_t out = ring.leased();
  std::size_t seen = high_water.load(std::memory_order_relaxed);
  while (out > seen && !high_water.compare_exchange_weak(seen, out, std::memory_order_relaxed)) {
  }
  co_return acquired;
}

// Range r in its slot (where.held), at its file offset modulo a page so that O_DIRECT can read
// straight into it, and each plan piece at its place in the range.
inline void place_in_slot(const load_range& r, landing& where) {
  where.whole = where.held.bytes().subspan(r.offset_bytes % page_bytes, r.length_bytes);
  where.pieces.clear();
  for (const plan_piece& piece : r.pieces)
    where.pieces.push_back(where.whole.subspan(piece.offset_bytes - r.offset_bytes, piece.length_bytes));
}

inline const cuda::upload_ticket& ticket_of(const cuda::upload_ticket& t) { return t; }
inline const cuda::upload_ticket& ticket_of(const std::shared_ptr<cuda::upload_ticket>& t) { return *t; }

// Waits for every ticket (all of them, also after a failure: none may be left in flight); the first
// error.
template <class Tickets>
result<void> wait_all(cuda::uploader& up, const Tickets& tickets) {
  result<void> first;
  for (const auto& t : tickets) {
    auto ok = up.wait(ticket_of(t));
    if (!ok && first) first = ok;
  }
  return first;
}

}  // namespace tz

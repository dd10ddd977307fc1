// Tensors as they land (see ready_order.hpp): per-tensor counts of what is still outstanding, and
// the handover in file order or as each completes.
#include "ready_order.hpp"

#include "pipeline.hpp"

#include "tz/engine/load_trace.hpp"

namespace tz {

namespace {

// Calls f(t) once for each tensor with a piece in range r (a tensor's pieces in one range are
// adjacent: a header and its data, or one part of a split tensor).
template <class F>
void for_each_tensor(const load_range& r, F&& f) {
  if (r.split_tensor != no_split) {
    f(static_cast<std::uint32_t>(r.split_tensor));
    return;
  }
  std::uint32_t last = UINT32_MAX;
  for (const plan_piece& piece : r.pieces) {
    if (piece.tensor == last) continue;
    last = piece.tensor;
    f(piece.tensor);
  }
}

}  // namespace

ready_order::ready_order(const pipeline& p, describe_fn describe, std::chrono::steady_clock::time_point started,
                         const std::vector<std::uint32_t>& extra)
    : p_(p), describe_(std::move(describe)), started_(started),
      left_(new std::atomic<std::uint32_t>[p.selected.size()]), done_(p.selected.size(), 0) {
  for (std::size_t t = 0; t < p.selected.size(); ++t) left_[t].store(0, std::memory_order_relaxed);
  for (const load_range& r : p.plan.ranges)
    for_each_tensor(r, [this](std::uint32_t t) { left_[t].fetch_add(1, std::memory_order_relaxed); });
  for (std::uint32_t t : extra) left_[t].fetch_add(1, std::memory_order_relaxed);
  // A split tensor whose header is checked beside the data waits for that check too.
  for (std::uint32_t t : p.deferred_headers) left_[t].fetch_add(1, std::memory_order_relaxed);
}

void ready_order::start() {
  for (std::uint32_t t = 0; t < p_.selected.size(); ++t)
    if (left_[t].load(std::memory_order_acquire) == 0) complete(t);
}

void ready_order::range_done(const load_range& r) {
  for_each_tensor(r, [this](std::uint32_t t) { unit_done(t); });
}

void ready_order::unit_done(std::uint32_t t) {
  if (left_[t].fetch_sub(1, std::memory_order_acq_rel) == 1) complete(t);
}

void ready_order::complete(std::uint32_t t) {
  std::lock_guard lock(mutex_);
  done_[t] = 1;
  if (!p_.options->ready_in_file_order) {
    hand_over(t);
    return;
  }
  while (next_ < done_.size() && done_[next_]) hand_over(static_cast<std::uint32_t>(next_++));
}

void ready_order::hand_over(std::uint32_t t) {
  // A failed load hands over nothing more: its remaining tensors may be incomplete or unchecked.
  if (stopped_ || p_.failed.load(std::memory_order_acquire)) return;
  tensor_ready ready = describe_(t);
  ready.position = t;
  ready.entry = p_.selected[t];
  const auto now = std::chrono::steady_clock::now();
  ready.seconds = std::chrono::duration<double>(now - started_).count();
  if (auto* trace = p_.options->trace.get()) trace->instant("ready " + format::display_name(ready.entry->path), now);
  try {
    p_.options->on_tensor_ready(ready);
  } catch (...) {
    stopped_ = true;  // the consumer's failure is its own; the load goes on
  }
}

}  // namespace tz

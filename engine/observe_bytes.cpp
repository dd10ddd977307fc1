// Observed loads (load_common_options::observe): every byte of the source reaches the observer once,
// in file order. Ranges take turns in plan order (file order: prepare_plan keeps it for them); each
// first reads for the observer what lies between the previous range and itself, then hands over its
// own bytes where they landed, before the checks decrypt them in place.
#include "pipeline.hpp"

#include <algorithm>

namespace tz {
namespace {

constexpr std::uint64_t gap_piece_bytes = 8 << 20;

// Reads [p.observed->at, until) from the source in pieces and hands them over.
task<result<void>> observe_gap(pipeline& p, std::uint64_t until) {
  auto& o = *p.observed;
  while (o.at < until) {
    const auto n = static_cast<std::size_t>(std::min(gap_piece_bytes, until - o.at));
    o.gap.resize(std::max(o.gap.size(), n));
    std::span<std::byte> piece[1] = {std::span(o.gap.data(), n)};
    TZ_CO_CHECK(co_await p.source->read(o.at, piece));
    p.options->observe->bytes(o.at, piece[0]);
    o.at += n;
  }
  co_return result<void>{};
}

}  // namespace

task<result<void>> observe_range(pipeline& p, const load_range& r, const landing& where, std::size_t index) {
  auto& o = *p.observed;
  if (!co_await o.turns.wait(static_cast<std::uint32_t>(index))) co_return result<void>{};  // the load failed
  // Passed on every path: a failure also aborts the turns, so no later range waits for this one.
  struct pass_turn {
    turnstile& t;
    ~pass_turn() { t.pass(); }
  } passes{o.turns};
  if (r.offset_bytes < o.at)
    co_return make_error(errc::invalid_argument, p.source->name() + ": range " + std::to_string(index) + " at offset " +
                                                     std::to_string(r.offset_bytes) + " is before offset " +
                                                     std::to_string(o.at) + ": an observed load needs its ranges in file order");
  TZ_CO_CHECK(co_await observe_gap(p, r.offset_bytes));
  if (!where.whole.empty()) {
    p.options->observe->bytes(o.at, where.whole);
  } else {
    std::uint64_t at = o.at;
    for (const auto& piece : where.pieces) {
      p.options->observe->bytes(at, piece);
      at += piece.size();
    }
  }
  o.at = r.offset_bytes + r.length_bytes;
  co_return result<void>{};
}

task<result<void>> observe_tail(pipeline& p) {
  TZ_CO_TRY(size, co_await p.source->size());
  TZ_CO_CHECK(co_await observe_gap(p, size));
  p.options->observe->end(size);
  co_return result<void>{};
}

}  // namespace tz

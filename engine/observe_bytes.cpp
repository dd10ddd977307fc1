// Observed loads (load_common_options::observe): every byte of the observer's chains reaches it once,
// in file order within each chain (one chain: the whole file; model signing's shards, or each file
// of a sharded checkpoint: one each, hashed side by side). Ranges take turns in their chain; each first reads for the
// observer what lies between the chain's previous range and itself, then hands over its own bytes
// where they landed (up to its chain's end: the next chain reads the rest itself), before the checks
// decrypt them in place.
#include "pipeline.hpp"

#include <algorithm>

namespace tz {
namespace {

constexpr std::uint64_t gap_piece_bytes = 8 << 20;

// Reads [c.at, until) from the source in pieces and hands them over.
task<result<void>> observe_gap(pipeline& p, observed_bytes::chain& c, std::uint64_t until) {
  while (c.at < until) {
    const auto n = static_cast<std::size_t>(std::min(gap_piece_bytes, until - c.at));
    c.gap.resize(std::max(c.gap.size(), n));
    std::span<std::byte> piece[1] = {std::span(c.gap.data(), n)};
    TZ_CO_CHECK(co_await p.source->read(c.at, piece));
    p.options->observe->bytes(c.at, piece[0]);
    c.at += n;
  }
  co_return result<void>{};
}

// Hands over what of `pieces` (consecutive, from file offset `at`) lies in [c.at, c.end): a range
// may begin before its chain (in the padding between a checkpoint's shards) and end after it (the
// next chain reads the rest itself).
void hand_over(pipeline& p, observed_bytes::chain& c, std::uint64_t at, std::span<const std::span<std::byte>> pieces) {
  for (const auto& piece : pieces) {
    const std::uint64_t piece_end = at + piece.size();
    if (at >= c.end) return;
    if (piece_end > c.at) {
      const auto skip = static_cast<std::size_t>(c.at - at);
      const auto n = static_cast<std::size_t>(std::min(piece_end, c.end) - c.at);
      p.options->observe->bytes(c.at, piece.subspan(skip, n));
      c.at += n;
    }
    at = piece_end;
  }
}

// Round-robin over the chains, each chain's ranges in their order: the chains advance side by side.
void alternate_chains(load_plan& plan, const std::vector<std::uint32_t>& chain_of, std::size_t chains) {
  std::vector<std::vector<std::size_t>> by_chain(chains);
  for (std::size_t i = 0; i < plan.ranges.size(); ++i) by_chain[chain_of[i]].push_back(i);
  std::vector<load_range> out;
  out.reserve(plan.ranges.size());
  for (std::size_t k = 0; out.size() < plan.ranges.size(); ++k)
    for (const auto& c : by_chain)
      if (k < c.size()) out.push_back(std::move(plan.ranges[c[k]]));
  plan.ranges = std::move(out);
}

}  // namespace

task<result<void>> plan_observation(pipeline& p, unsigned readers) {
  auto& o = *p.observed;
  TZ_CO_TRY(size, co_await p.source->size());
  auto extents = p.options->observe->chains(size);
  if (extents.empty()) extents.push_back({size, size});  // nothing to hand over: only end()
  for (const auto& e : extents) {
    auto c = std::make_unique<observed_bytes::chain>();
    c->at = e.begin, c->end = e.end;
    o.chains.push_back(std::move(c));
  }
  auto& ranges = p.plan.ranges;
  std::stable_sort(ranges.begin(), ranges.end(),
                   [](const load_range& a, const load_range& b) { return a.offset_bytes < b.offset_bytes; });
  // A range belongs to the chain its first byte is in, or to the next one when it begins between
  // chains; after the last chain, to the last.
  auto chain_of = [&](const load_range& r) {
    auto it = std::upper_bound(extents.begin(), extents.end(), r.offset_bytes,
                               [](std::uint64_t off, const byte_observer::extent& e) { return off < e.end; });
    return static_cast<std::uint32_t>(std::min<std::size_t>(it - extents.begin(), extents.size() - 1));
  };
  o.chain_of_range.resize(ranges.size());
  for (std::size_t i = 0; i < ranges.size(); ++i) o.chain_of_range[i] = chain_of(ranges[i]);
  // Alternating puts a split tensor's later parts before its earlier ones across a chain's end; a
  // verified load hashes those parts in order (split_state::turns), which could then wait on a
  // range no reader has taken: verified loads keep file order.
  if (extents.size() > 1 && readers > 1 && !p.options->verify) {
    alternate_chains(p.plan, o.chain_of_range, extents.size());
    for (std::size_t i = 0; i < ranges.size(); ++i) o.chain_of_range[i] = chain_of(ranges[i]);
  }
  std::vector<std::uint32_t> next(extents.size(), 0);
  o.turn_of_range.resize(ranges.size());
  for (std::size_t i = 0; i < ranges.size(); ++i) o.turn_of_range[i] = next[o.chain_of_range[i]]++;
  co_return result<void>{};
}

task<result<void>> observe_range(pipeline& p, const load_range& r, const landing& where, std::size_t index) {
  auto& o = *p.observed;
  auto& c = *o.chains[o.chain_of_range[index]];
  if (!co_await c.turns.wait(o.turn_of_range[index])) co_return result<void>{};  // the load failed
  // Passed on every path: a failure also aborts the turns, so no later range waits for this one.
  struct pass_turn {
    turnstile& t;
    ~pass_turn() { t.pass(); }
  } passes{c.turns};
  TZ_CO_CHECK(co_await observe_gap(p, c, std::min(r.offset_bytes, c.end)));
  if (!where.whole.empty()) {
    const std::span<std::byte> whole[1] = {where.whole};
    hand_over(p, c, r.offset_bytes, whole);
  } else {
    hand_over(p, c, r.offset_bytes, where.pieces);
  }
  co_return result<void>{};
}

task<result<void>> observe_tail(pipeline& p) {
  TZ_CO_TRY(size, co_await p.source->size());
  for (auto& c : p.observed->chains) TZ_CO_CHECK(co_await observe_gap(p, *c, c->end));
  p.options->observe->end(size);
  co_return result<void>{};
}

}  // namespace tz

// Private to engine/: what the host and device extent loads (partial_load.cpp, partial_device.cpp)
// share. The planning of whole tensors and of parts is one; where a planned piece lands is
// an address in the destination's own memory (host: the caller's spans; device: addresses inside
// the caller's device region, never dereferenced on the host), and the sink turns it into bytes.
#pragma once

#include "pipeline.hpp"

#include "tz/engine/partial_load.hpp"

#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace tz {

// Where one range's pieces land: per piece the destination address (null: a header or gap, which
// the sink keeps aside), or, for a staged range (encrypted parts), the whole range is kept aside,
// decrypted there, and its parts copied out: (offset in the range, destination).
struct range_target {
  std::vector<std::byte*> piece_dst;
  bool staged = false;
  std::vector<std::pair<std::uint64_t, std::span<std::byte>>> copy_out;
};

// A sink for extents; its destinations are filled by the planner before the pipeline runs.
class extent_sink : public sink {
 public:
  explicit extent_sink(const pipeline& p) : p_(p) {}
  // Whole tensors: data piece of selected tensor t lands in whole[t] at its offset in the tensor.
  std::vector<std::span<std::byte>> whole;
  // Parts: per plan range (empty for a load of whole tensors).
  std::vector<range_target> targets;
  // Zeros for a meta tensor's bytes (nothing stored), called while planning, before the pipeline.
  virtual result<void> zero(std::span<std::byte> dst) = 0;

 protected:
  const range_target* target_of(const load_range& r) const {
    return targets.empty() ? nullptr : &targets[static_cast<std::size_t>(&r - p_.plan.ranges.data())];
  }
  // Piece k of range r's destination address, or null when it is not the caller's (header, gap).
  std::byte* destination(const load_range& r, std::size_t k, const range_target* t) const {
    const plan_piece& piece = r.pieces[k];
    if (t != nullptr) return t->piece_dst[k];
    if (piece.what != plan_piece::kind::data) return nullptr;
    return whole[piece.tensor].data() + (piece.offset_bytes - p_.selected[piece.tensor]->data_offset);
  }
  const pipeline& p_;
};

// Makes the sink of one pipeline (a load of extents runs one for whole tensors, one for parts).
using extent_sink_maker = std::function<std::unique_ptr<extent_sink>(pipeline&)>;

// How an extent load plans: the largest range (a staging slot; unbounded for host memory).
struct extent_plan_limits {
  std::uint64_t range_limit_bytes = std::numeric_limits<std::uint64_t>::max();
};

// Checks the extents against the index (errc::invalid_argument for a part outside its tensor or a
// span of the wrong size, errc::unsupported for a verified part of a tensor) and runs them: whole
// tensors through the usual plan, parts through their own, each pipeline with a sink from `make`.
task<result<extent_load_result>> run_extents(scheduler& sched, const loader& l, std::vector<tensor_extent> extents,
                                             extent_options o, const extent_sink_maker& make,
                                             extent_plan_limits limits = {});

}  // namespace tz

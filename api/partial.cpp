// The facade's partial loads (tensorizer.hpp: chunk_bounds, model::plan_partition, plan_slice,
// load_parts) over the engine's (tz/engine/partial_load.hpp).
#include "api_detail.hpp"

#include "tz/engine/partial_load.hpp"

namespace tensorizer {

using detail::from_tz;

std::pair<std::uint64_t, std::uint64_t> chunk_bounds(std::uint64_t size, std::uint64_t parts, std::uint64_t k) noexcept {
  return tz::chunk_bounds(size, parts, k);
}

result<partition> model::plan_partition(unsigned world, bool whole_tensors) const {
  return detail::guarded(p_->name, [&]() -> result<partition> {
    const auto& index = p_->opened->index();
    tz::partition_options o;
    o.whole_tensors = whole_tensors;
    o.align_bytes = index.header.has_crypt_info() ? 2u << 20 : 4096;  // whole cipher chunks per rank
    auto plan = tz::plan_partition(index, {}, world, o);
    if (!plan) return from_tz(plan.error());
    partition out;
    out.begin = std::move(plan->begin);
    out.flat_offset = std::move(plan->flat_offset);
    for (const auto& rank : plan->parts) {
      auto& mine = out.parts.emplace_back();
      for (const auto& p : rank) mine.push_back({p.index, p.data_begin_bytes, p.length_bytes});
    }
    return out;
  });
}

result<std::vector<slice_part>> model::plan_slice(std::size_t index, unsigned dim, std::uint64_t start,
                                                  std::uint64_t stop) const {
  return detail::guarded(p_->name, [&]() -> result<std::vector<slice_part>> {
    auto plan = tz::plan_slice(p_->opened->index(), index, dim, start, stop);
    if (!plan) return from_tz(plan.error());
    std::vector<slice_part> out;
    for (const auto& s : *plan) out.push_back({{s.part.index, s.part.data_begin_bytes, s.part.length_bytes}, s.out_offset_bytes});
    return out;
  });
}

result<part_load_result> model::load_parts(const std::vector<part_destination>& dst) const {
  return detail::guarded(p_->name, [&]() -> result<part_load_result> {
    std::vector<tz::tensor_extent> extents;
    for (const auto& d : dst) extents.push_back({{d.part.index, d.part.begin_bytes, d.part.length_bytes}, d.bytes});
    tz::extent_options o;
    static_cast<tz::load_options&>(o) = detail::load_options_from(p_->opts);
    auto got = detail::traced(p_->opts, o, [&] { return tz::load_extents(*p_->sched, *p_->opened, std::move(extents), o); });
    if (!got) return from_tz(got.error());
    return part_load_result{detail::timings_of(got->timings), got->read_bytes};
  });
}

}  // namespace tensorizer

// The facade's partial loads (tensorizer.hpp: chunk_bounds, model::plan_partition, plan_slice,
// load_parts, load_parts_to_device) over the engine's (tz/engine/partial_load.hpp).
#include "api_detail.hpp"

#include "tz/engine/partial_load.hpp"

#include <algorithm>
#include <cstdint>

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
    auto got = detail::run_load(*p_, o, [&] { return tz::load_extents(*p_->sched, *p_->opened, std::move(extents), o); });
    if (!got) return from_tz(got.error());
    return part_load_result{detail::timings_of(got->timings), got->read_bytes};
  });
}

result<device_part_load_result> model::load_parts_to_device(int device,
                                                             const std::vector<device_part_destination>& dst) const {
  return detail::guarded(p_->name, [&]() -> result<device_part_load_result> {
    // One region spanning every destination; each part's place is its offset in it.
    std::uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (const auto& d : dst) {
      if (d.part.length_bytes == 0) continue;
      if (!d.device_address) return error{errc::invalid_argument, p_->name + ": load_parts_to_device: a null device address"};
      const auto at = reinterpret_cast<std::uintptr_t>(d.device_address);
      lo = std::min(lo, at), hi = std::max<std::uintptr_t>(hi, at + d.part.length_bytes);
    }
    if (hi == 0) lo = 0;
    std::vector<tz::device_extent> extents;
    for (const auto& d : dst)
      if (d.part.length_bytes != 0)
        extents.push_back({{d.part.index, d.part.begin_bytes, d.part.length_bytes},
                           reinterpret_cast<std::uintptr_t>(d.device_address) - lo});
    // The process's context of that device, as load_to_device uses.
    auto ctx = tz::device_context::shared(device);
    if (!ctx) return from_tz(ctx.error());
    tz::device_extent_options o;
    static_cast<tz::load_common_options&>(o) = detail::load_options_from(p_->opts);
    const tz::device_region region{reinterpret_cast<void*>(lo), hi - lo, device};
    auto got = detail::run_load(*p_, o, [&] {
      return tz::load_extents_to_device(*p_->sched, **ctx, *p_->opened, std::move(extents), region, o);
    });
    if (!got) return from_tz(got.error());
    device_part_load_result out;
    out.timings = detail::timings_of(got->timings);
    out.read_bytes = got->read_bytes;
    out.pinned_bytes = got->ring_bytes;
    return out;
  });
}

}  // namespace tensorizer

// The pure planners of partial loads: a checkpoint's data cut into balanced per-rank shares, and
// the stretches of a tensor-parallel slice (see partial_load.hpp).
#include "tz/engine/partial_load.hpp"

#include "tz/engine/load_plan.hpp"

#include <algorithm>

namespace tz {

namespace {

// The allowed cut nearest to flat offset `want` inside tensor `t` (whose data spans flat
// [at, at + size)): a tensor boundary, or an aligned offset inside it.
std::uint64_t nearest_cut(std::uint64_t want, std::uint64_t at, std::uint64_t size, bool inside_ok,
                          std::uint64_t align) {
  const std::uint64_t off = want - at;
  if (!inside_ok) return off * 2 < size ? at : at + size;
  const std::uint64_t down = off / align * align;
  const std::uint64_t up = std::min(size, down + align);
  return at + (off - down <= up - off ? down : up);
}

}  // namespace

result<partition_plan> plan_partition(const format::file_index& index, std::vector<std::size_t> which, unsigned world,
                                      const partition_options& options) {
  if (world == 0) return make_error(errc::invalid_argument, index.source + ": a partition of world size 0");
  if (options.align_bytes == 0) return make_error(errc::invalid_argument, index.source + ": a partition alignment of 0");
  TZ_TRY(selected, select_in_file_order(index, std::move(which)));
  partition_plan plan;
  std::uint64_t total = 0;
  for (const auto* e : selected) {
    plan.tensors.push_back(static_cast<std::size_t>(e - index.tensors.data()));
    plan.flat_offset.push_back(total);
    total += e->deserialized_bytes;
  }
  plan.begin.assign(world + 1, 0);
  plan.begin[world] = total;
  std::size_t t = 0;
  for (unsigned r = 1; r < world; ++r) {
    const std::uint64_t want = total / world * r + total % world * r / world;  // r * total / world, no overflow
    while (t < selected.size() && plan.flat_offset[t] + selected[t]->deserialized_bytes <= want) ++t;
    std::uint64_t cut = total;
    if (t < selected.size()) {
      const auto& e = *selected[t];
      cut = nearest_cut(want, plan.flat_offset[t], e.deserialized_bytes, !options.whole_tensors && !e.is_meta(),
                        options.align_bytes);
    }
    plan.begin[r] = std::max(cut, plan.begin[r - 1]);
  }
  plan.parts.resize(world);
  for (unsigned r = 0; r < world; ++r) {
    const std::uint64_t lo = plan.begin[r], hi = plan.begin[r + 1];
    for (std::size_t i = 0; i < selected.size(); ++i) {
      const std::uint64_t a = plan.flat_offset[i], b = a + selected[i]->deserialized_bytes;
      if (b <= lo || a >= hi) continue;
      const std::uint64_t from = std::max(a, lo), to = std::min(b, hi);
      plan.parts[r].push_back({plan.tensors[i], from - a, to - from});
    }
  }
  return plan;
}

std::pair<std::uint64_t, std::uint64_t> chunk_bounds(std::uint64_t size, std::uint64_t parts, std::uint64_t k) noexcept {
  if (parts == 0) return {0, 0};
  const std::uint64_t step = size / parts + (size % parts != 0);
  const std::uint64_t begin = std::min(size, step * k);
  return {begin, std::min(size, begin + step)};
}

result<std::vector<slice_stretch>> plan_slice(const format::file_index& index, std::size_t tensor, unsigned dim,
                                              std::uint64_t start, std::uint64_t stop) {
  if (tensor >= index.tensors.size())
    return make_error(errc::invalid_argument, index.source + ": tensor index " + std::to_string(tensor) + " out of range");
  const auto& e = index.tensors[tensor];
  const auto fail = [&](const std::string& why) {
    return make_error(errc::invalid_argument, index.source + ": slice of tensor " + e.name + ": " + why);
  };
  if (dim >= e.shape.size())
    return fail("dimension " + std::to_string(dim) + " of a " + std::to_string(e.shape.size()) + "-d tensor");
  if (start > stop || stop > e.shape[dim])
    return fail("[" + std::to_string(start) + ", " + std::to_string(stop) + ") outside dimension " +
                std::to_string(dim) + " of size " + std::to_string(e.shape[dim]));
  std::uint64_t outer = 1, inner = e.dtype.itemsize;
  for (unsigned d = 0; d < dim; ++d) outer *= e.shape[d];
  for (std::size_t d = dim + 1; d < e.shape.size(); ++d) inner *= e.shape[d];
  if (outer * e.shape[dim] * inner != e.deserialized_bytes)
    return fail("its shape and item size do not give its " + std::to_string(e.deserialized_bytes) + " bytes");
  std::vector<slice_stretch> out;
  const std::uint64_t row = e.shape[dim] * inner, take = (stop - start) * inner;
  if (take == 0) return out;
  for (std::uint64_t o = 0; o < outer; ++o) {
    const std::uint64_t begin = o * row + start * inner;
    if (!out.empty() && out.back().part.data_begin_bytes + out.back().part.length_bytes == begin) {
      out.back().part.length_bytes += take;  // a whole-dimension slice: rows are adjacent
      continue;
    }
    out.push_back({{tensor, begin, take}, o * take});
  }
  return out;
}

}  // namespace tz

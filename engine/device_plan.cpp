// Planning a load to device memory: pack whole small tensors into slot-sized reads, cut large ones
// at aligned split points, and lay the tensors out in one device allocation.
#include "tz/device_plan.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace tz {

namespace {

std::uint64_t align_up(std::uint64_t n, std::uint64_t a) { return (n + a - 1) / a * a; }

std::uint64_t extent_begin(const format::tensor_entry& e, bool with_headers) {
  return with_headers ? e.header_offset : e.data_offset;
}

// Builds the ranges as it walks the selection; `open` is the range being packed.
struct range_packer {
  const device_plan_options& options;
  device_plan& plan;
  device_range open;

  void close() {
    if (open.length_bytes == 0) return;
    plan.read_bytes += open.length_bytes;
    plan.ranges.push_back(std::move(open));
    open = device_range{};
  }

  // Appends a whole tensor (header and data) to the open range, or to a fresh one when it does not
  // fit or the gap before it is too large to read through.
  void add_whole(std::uint32_t slot, const format::tensor_entry& e) {
    const std::uint64_t begin = extent_begin(e, options.with_headers);
    const std::uint64_t end = e.end_offset();
    if (end == begin) return;  // nothing stored and no header: nothing to read
    if (open.length_bytes > 0) {
      const std::uint64_t open_end = open.offset_bytes + open.length_bytes;
      if (begin < open_end || begin - open_end > options.gap_merge_bytes || end - open.offset_bytes > options.range_bytes) {
        close();
      }
    }
    if (open.length_bytes == 0) open.offset_bytes = begin;
    if (e.data_offset > begin) open.pieces.push_back({slot, true, begin, e.data_offset - begin, 0});
    if (e.data_length > 0) open.pieces.push_back({slot, false, e.data_offset, e.data_length, 0});
    open.length_bytes = end - open.offset_bytes;
  }

  // Cuts a large tensor's data into ranges of whole alignment units, one range each.
  void add_split(std::uint32_t slot, const format::tensor_entry& e, std::uint64_t align) {
    close();
    const std::uint64_t step = options.range_bytes / align * align;
    std::uint32_t part = 0;
    for (std::uint64_t done = 0; done < e.data_length; done += step) {
      const std::uint64_t take = std::min(step, e.data_length - done);
      device_range r;
      r.offset_bytes = e.data_offset + done;
      r.length_bytes = take;
      r.pieces.push_back({slot, false, e.data_offset + done, take, done});
      r.split_slot = slot;
      r.part = part++;
      plan.read_bytes += take;
      plan.ranges.push_back(std::move(r));
    }
    plan.part_count[slot] = part;
  }
};

}  // namespace

bool needs_split(const format::tensor_entry& e, const device_plan_options& options) noexcept {
  return e.end_offset() - extent_begin(e, options.with_headers) > options.range_bytes;
}

result<device_plan> make_device_plan(std::span<const format::tensor_entry* const> selected,
                                     std::span<const std::uint64_t> split_align_bytes,
                                     const device_plan_options& options) {
  if (options.range_bytes == 0) return make_error(errc::invalid_argument, "device plan: the range size is 0");
  if (split_align_bytes.size() != selected.size()) {
    return make_error(errc::invalid_argument, "device plan: one split alignment per selected tensor is needed");
  }
  device_plan plan;
  plan.device_offset.assign(selected.size(), 0);
  plan.part_count.assign(selected.size(), 0);
  range_packer packer{options, plan, {}};
  for (std::uint32_t slot = 0; slot < selected.size(); ++slot) {
    const format::tensor_entry& e = *selected[slot];
    plan.device_offset[slot] = plan.device_bytes;
    plan.device_bytes = align_up(plan.device_bytes + e.deserialized_bytes, device_align_bytes);
    plan.data_bytes += e.data_length;
    if (!needs_split(e, options)) {
      packer.add_whole(slot, e);
      continue;
    }
    const std::uint64_t align = split_align_bytes[slot];
    if (align == 0) return make_error(errc::invalid_argument, "device plan: tensor " + e.name + " has split alignment 0");
    if (align > options.range_bytes) {
      return make_error(errc::unsupported,
                        "tensor " + e.name + " must be split into whole units of " + std::to_string(align) +
                            " bytes (its cipher chunks), larger than the " + std::to_string(options.range_bytes) +
                            "-byte staging slots; use larger slots");
    }
    packer.add_split(slot, e, align);
  }
  packer.close();
  return plan;
}

void interleave_split_tensors(device_plan& plan, std::size_t width) {
  const std::size_t end = plan.ranges.size();
  if (width < 2 || end < 2) return;
  // Streams of range indices: one per split tensor (its parts, consecutive in the plan), one per
  // unsplit range.
  std::vector<std::vector<std::size_t>> streams;
  for (std::size_t i = 0; i < end; ++i) {
    const device_range& r = plan.ranges[i];
    const bool continues = r.split_slot != no_split && i > 0 && plan.ranges[i - 1].split_slot == r.split_slot;
    if (continues) {
      streams.back().push_back(i);
    } else {
      streams.push_back({i});
    }
  }
  std::vector<std::size_t> order;
  order.reserve(end);
  struct cursor {
    std::size_t stream = 0;
    std::size_t next = 0;
  };
  std::vector<cursor> active;
  std::size_t next_stream = 0;
  while (order.size() < end) {
    while (active.size() < width && next_stream < streams.size()) active.push_back({next_stream++, 0});
    for (cursor& c : active) order.push_back(streams[c.stream][c.next++]);
    std::erase_if(active, [&](const cursor& c) { return c.next == streams[c.stream].size(); });
  }
  std::vector<device_range> reordered;
  reordered.reserve(end);
  for (std::size_t i : order) reordered.push_back(std::move(plan.ranges[i]));
  plan.ranges = std::move(reordered);
}

}  // namespace tz

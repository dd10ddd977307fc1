// Planning: pack whole tensors into bounded reads, cut large ones at aligned points, and order
// the parts of split tensors so that several hash at once.
#include "tz/engine/load_plan.hpp"

#include <algorithm>
#include <numeric>
#include <string>

namespace tz {

namespace {

std::uint64_t extent_begin(const format::tensor_entry& e, bool with_headers) {
  return with_headers ? e.header_offset : e.data_offset;
}

// Builds the ranges as it walks the selection; `open` is the range being packed.
struct range_packer {
  const plan_options& options;
  load_plan& plan;
  load_range open;

  void close() {
    if (open.length_bytes == 0) return;
    plan.read_bytes += open.length_bytes;
    plan.ranges.push_back(std::move(open));
    open = load_range{};
  }

  // Appends a whole tensor (header and data) to the open range, or to a fresh one when it does not
  // fit or the gap before it is too large to read through.
  void add_whole(std::uint32_t tensor, const format::tensor_entry& e) {
    const std::uint64_t begin = extent_begin(e, options.with_headers);
    const std::uint64_t end = e.end_offset();
    if (end == begin) return;  // nothing stored and no header: nothing to read
    if (open.length_bytes > 0) {
      const std::uint64_t open_end = open.offset_bytes + open.length_bytes;
      if (begin < open_end || begin - open_end > options.gap_merge_bytes ||
          end - open.offset_bytes > range_bytes_at(options, open.offset_bytes)) {
        close();
      } else if (begin > open_end) {
        open.pieces.push_back({plan_piece::kind::gap, tensor, open_end, begin - open_end, 0});
      }
    }
    if (open.length_bytes == 0) open.offset_bytes = begin;
    if (e.data_offset > begin) open.pieces.push_back({plan_piece::kind::header, tensor, begin, e.data_offset - begin, 0});
    if (e.data_length > 0) open.pieces.push_back({plan_piece::kind::data, tensor, e.data_offset, e.data_length, 0});
    open.length_bytes = end - open.offset_bytes;
  }

  // Cuts a large tensor's data into ranges of whole alignment units, one range each.
  void add_split(std::uint32_t tensor, const format::tensor_entry& e, std::uint64_t align) {
    close();
    std::uint32_t part = 0;
    for (std::uint64_t done = 0, take = 0; done < e.data_length; done += take) {
      const std::uint64_t step = std::max(align, range_bytes_at(options, e.data_offset + done) / align * align);
      take = std::min(step, e.data_length - done);
      load_range r;
      r.offset_bytes = e.data_offset + done;
      r.length_bytes = take;
      r.pieces.push_back({plan_piece::kind::data, tensor, e.data_offset + done, take, done});
      r.split_tensor = tensor;
      r.part = part++;
      plan.read_bytes += take;
      plan.ranges.push_back(std::move(r));
    }
    plan.part_count[tensor] = part;
  }
};

}  // namespace

std::uint64_t range_bytes_at(const plan_options& options, std::uint64_t offset) noexcept {
  if (offset >= options.ramp_until_offset || options.ramp_range_bytes == 0) return options.range_bytes;
  return std::min(options.range_bytes, options.ramp_range_bytes);
}

bool needs_split(const format::tensor_entry& e, const plan_options& options) noexcept {
  const std::uint64_t begin = extent_begin(e, options.with_headers);
  return e.end_offset() - begin > range_bytes_at(options, begin);
}

result<load_plan> make_plan(std::span<const format::tensor_entry* const> selected,
                            std::span<const std::uint64_t> split_align_bytes, const plan_options& options) {
  if (options.range_bytes == 0 || options.range_limit_bytes < options.range_bytes) {
    return make_error(errc::invalid_argument, "plan: the range size must be at least 1 byte and within its limit");
  }
  if (split_align_bytes.size() != selected.size()) {
    return make_error(errc::invalid_argument, "plan: one split alignment per selected tensor is needed");
  }
  load_plan plan;
  plan.part_count.assign(selected.size(), 0);
  range_packer packer{options, plan, {}};
  for (std::uint32_t tensor = 0; tensor < selected.size(); ++tensor) {
    const format::tensor_entry& e = *selected[tensor];
    plan.data_bytes += e.data_length;
    if (!needs_split(e, options)) {
      packer.add_whole(tensor, e);
      continue;
    }
    const std::uint64_t align = split_align_bytes[tensor];
    if (align == 0) return make_error(errc::invalid_argument, "plan: tensor " + e.name + " has split alignment 0");
    if (align > options.range_limit_bytes) {
      return make_error(errc::unsupported,
                        "tensor " + e.name + " must be split into whole units of " + std::to_string(align) +
                            " bytes (its cipher chunks), larger than the " + std::to_string(options.range_limit_bytes) +
                            "-byte staging slots; use larger slots");
    }
    packer.add_split(tensor, e, align);
  }
  packer.close();
  return plan;
}

result<std::vector<const format::tensor_entry*>> select_in_file_order(const format::file_index& index,
                                                                      std::vector<std::size_t> which) {
  if (which.empty()) {
    which.resize(index.tensors.size());
    std::iota(which.begin(), which.end(), std::size_t{0});
  }
  std::sort(which.begin(), which.end());
  if (std::adjacent_find(which.begin(), which.end()) != which.end())
    return make_error(errc::invalid_argument, index.source + ": a tensor was selected twice");
  std::vector<const format::tensor_entry*> out;
  out.reserve(which.size());
  for (std::size_t i : which) {
    if (i >= index.tensors.size())
      return make_error(errc::invalid_argument, index.source + ": tensor position " + std::to_string(i) +
                                                    " is out of range (the file has " +
                                                    std::to_string(index.tensors.size()) + " tensors)");
    out.push_back(&index.tensors[i]);  // parse_index guarantees data_length is 0 or the full size
  }
  return out;
}

std::vector<std::vector<std::size_t>> batches_by_bytes(const format::file_index& index,
                                                       std::span<const std::size_t> which, std::uint64_t cap_bytes) {
  std::vector<std::vector<std::size_t>> out;
  std::uint64_t in_batch = 0;
  for (std::size_t i : which) {
    const std::uint64_t n = i < index.tensors.size() ? index.tensors[i].deserialized_bytes : 0;
    // Written so that no sum wraps: a meta tensor's size comes from its shape alone.
    if (out.empty() || (!out.back().empty() && (in_batch > cap_bytes || n > cap_bytes - in_batch)))
      out.emplace_back(), in_batch = 0;
    out.back().push_back(i);
    in_batch = n > UINT64_MAX - in_batch ? UINT64_MAX : in_batch + n;
  }
  return out;
}

void interleave_split_tensors(load_plan& plan, std::size_t width, bool longest_first) {
  const std::size_t end = plan.ranges.size();
  if (width < 2 || end < 2) return;
  // Streams of range indices: one per split tensor (its parts, consecutive in the plan), one per
  // whole range.
  std::vector<std::vector<std::size_t>> streams;
  for (std::size_t i = 0; i < end; ++i) {
    const load_range& r = plan.ranges[i];
    const bool continues = r.split_tensor != no_split && i > 0 && plan.ranges[i - 1].split_tensor == r.split_tensor;
    if (continues) {
      streams.back().push_back(i);
    } else {
      streams.push_back({i});
    }
  }
  // Longest first: a split tensor's hashing is a chain one core long, so the longest chains must
  // start at once, or the last of them (a model's lm_head, at the end of the file) runs alone after
  // everything else (2-core host, verified, a 512 MiB tensor after 512 MiB of 16 MiB ones: 1.13
  // GB/s in file order, 1.23 longest first; docs/gpu.md). Ties, and whole ranges among themselves,
  // keep file order.
  std::vector<std::uint64_t> stream_bytes(streams.size());  // 0 for whole ranges: after every split tensor
  for (std::size_t s = 0; s < streams.size(); ++s) {
    if (plan.ranges[streams[s][0]].split_tensor == no_split) continue;
    for (std::size_t i : streams[s]) stream_bytes[s] += plan.ranges[i].length_bytes;
  }
  std::vector<std::size_t> by_length(streams.size());
  for (std::size_t s = 0; s < by_length.size(); ++s) by_length[s] = s;
  if (longest_first) {
    std::stable_sort(by_length.begin(), by_length.end(),
                     [&](std::size_t a, std::size_t b) { return stream_bytes[a] > stream_bytes[b]; });
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
    while (active.size() < width && next_stream < streams.size()) active.push_back({by_length[next_stream++], 0});
    for (cursor& c : active) order.push_back(streams[c.stream][c.next++]);
    std::erase_if(active, [&](const cursor& c) { return c.next == streams[c.stream].size(); });
  }
  std::vector<load_range> reordered;
  reordered.reserve(plan.ranges.size());
  for (std::size_t i : order) reordered.push_back(std::move(plan.ranges[i]));
  plan.ranges = std::move(reordered);
}

}  // namespace tz

// Planning: group selected tensors into contiguous runs, then cut runs into bounded reads.
#include "tz/load_plan.hpp"

#include "tz/host_memory.hpp"

#include <algorithm>
#include <cassert>
#include <numeric>

namespace tz {

namespace {

// A contiguous stretch of the file holding selected tensors (and small gaps between them).
struct run {
  std::uint64_t offset_bytes = 0;
  std::uint64_t end_bytes = 0;
  std::vector<plan_piece> pieces;
};

std::vector<run> make_runs(std::span<const format::tensor_entry* const> selected, bool with_headers,
                           const plan_options& options, load_plan& plan) {
  std::vector<run> runs;
  for (std::uint32_t slot = 0; slot < selected.size(); ++slot) {
    const format::tensor_entry& e = *selected[slot];
    std::uint64_t begin = with_headers ? e.header_offset : e.data_offset;
    std::uint64_t end = e.end_offset();
    plan.tensor_read_bytes[slot] = end - begin;
    plan.data_bytes += e.data_length;
    if (end == begin) continue;  // nothing stored: zero-size or meta tensor without a header read
    if (runs.empty() || begin < runs.back().end_bytes || begin - runs.back().end_bytes > options.gap_merge_bytes) {
      runs.push_back({begin, begin, {}});
    } else if (begin > runs.back().end_bytes) {
      std::uint64_t gap = begin - runs.back().end_bytes;
      runs.back().pieces.push_back({plan_piece::kind::gap, slot, runs.back().end_bytes, gap, plan.side_bytes});
      plan.side_bytes += gap;
    }
    run& r = runs.back();
    if (e.data_offset > begin) {
      plan.header_side_offset[slot] = plan.side_bytes;
      r.pieces.push_back({plan_piece::kind::header, slot, begin, e.data_offset - begin, plan.side_bytes});
      plan.side_bytes += e.data_offset - begin;
    }
    if (e.data_length > 0) r.pieces.push_back({plan_piece::kind::data, slot, e.data_offset, e.data_length, 0});
    r.end_bytes = end;
  }
  return runs;
}

// How much of a data piece (already `done` bytes in) fits into `room` bytes, respecting the split
// alignment; 0 when nothing aligned fits and the caller should start a new range.
std::uint64_t data_take(const plan_piece& p, std::uint64_t data_begin, std::uint64_t done, std::uint64_t room,
                        std::uint64_t align) {
  std::uint64_t left = p.length_bytes - done;
  if (left <= room) return left;
  std::uint64_t rel_end = (p.offset_bytes - data_begin) + done + room;  // relative to data start
  std::uint64_t aligned_end = rel_end / align * align;
  std::uint64_t rel_done = (p.offset_bytes - data_begin) + done;
  return aligned_end > rel_done ? aligned_end - rel_done : 0;
}

void cut_run(const run& r, std::span<const format::tensor_entry* const> selected, const plan_options& options,
             load_plan& plan) {
  // Place the run in the mirror at the same offset modulo a page as in the file.
  std::uint64_t base = (plan.mirror_bytes + page_bytes - 1) / page_bytes * page_bytes + r.offset_bytes % page_bytes;
  plan.mirror_bytes = base + (r.end_bytes - r.offset_bytes);
  auto mirror_of = [&](std::uint64_t file_offset) { return base + (file_offset - r.offset_bytes); };

  load_range cur{r.offset_bytes, 0, mirror_of(r.offset_bytes), {}};
  auto close = [&] {
    if (cur.length_bytes == 0) return;
    std::uint64_t next = cur.offset_bytes + cur.length_bytes;
    plan.read_bytes += cur.length_bytes;
    plan.ranges.push_back(std::move(cur));
    cur = load_range{next, 0, mirror_of(next), {}};
  };
  for (const plan_piece& p : r.pieces) {
    if (p.what == plan_piece::kind::data) plan.mirror_data_offset[p.slot] = mirror_of(p.offset_bytes);
    if (p.what == plan_piece::kind::header) plan.mirror_data_offset[p.slot] = mirror_of(p.offset_bytes + p.length_bytes);
    if (p.what != plan_piece::kind::data) {
      // Headers and gaps are small and never split.
      if (cur.length_bytes > 0 && cur.length_bytes + p.length_bytes > options.range_bytes) close();
      cur.pieces.push_back(p);
      cur.length_bytes += p.length_bytes;
      continue;
    }
    std::uint64_t data_begin = selected[p.slot]->data_offset;
    std::uint64_t done = 0;
    while (done < p.length_bytes) {
      std::uint64_t room = options.range_bytes > cur.length_bytes ? options.range_bytes - cur.length_bytes : 0;
      std::uint64_t take = data_take(p, data_begin, done, room, options.split_align_bytes);
      if (take == 0 && cur.length_bytes > 0) {
        close();
        continue;
      }
      if (take == 0) take = std::min(p.length_bytes - done, options.split_align_bytes);  // one whole chunk
      cur.pieces.push_back({plan_piece::kind::data, p.slot, p.offset_bytes + done, take, 0});
      cur.length_bytes += take;
      done += take;
      if (cur.length_bytes >= options.range_bytes) close();
    }
  }
  close();
}

}  // namespace

load_plan make_plan(std::span<const format::tensor_entry* const> selected, bool with_headers,
                    const plan_options& options) {
  assert(options.range_bytes > 0 && options.split_align_bytes > 0);
  load_plan plan;
  plan.tensor_read_bytes.assign(selected.size(), 0);
  plan.mirror_data_offset.assign(selected.size(), 0);
  plan.header_side_offset.assign(selected.size(), 0);
  for (const run& r : make_runs(selected, with_headers, options, plan)) cut_run(r, selected, options, plan);
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

}  // namespace tz

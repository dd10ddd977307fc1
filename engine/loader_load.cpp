// The loader's load entry points: selection checks, options, plan, and the two destination layouts.
#include "pipeline_request.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <numeric>

namespace tz {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

constexpr std::uint64_t meta_align_bytes = 64;

std::uint64_t auto_range_bytes(std::uint64_t read_bytes, unsigned readers, std::uint64_t align) {
  // Big reads amortise the per-read cost; at least ~4 ranges per reader balance the workers.
  std::uint64_t target = read_bytes / (std::uint64_t{readers} * 4);
  target = std::clamp<std::uint64_t>(target, 1 << 20, 16 << 20);
  target = std::max<std::uint64_t>(target / (64 << 10) * (64 << 10), 64 << 10);
  return std::max(align, target / align * align);
}

// Fills in the automatic knobs and plans the reads.
void plan_request(loader::pipeline_request& req, const scheduler& sched) {
  auto& o = req.options;
  if (o.readers == 0) o.readers = 2 * sched.thread_count();
  std::uint64_t align = o.stage ? std::max<std::uint64_t>(1, o.stage->split_align_bytes()) : 1;
  std::uint64_t stored = 0;
  for (const auto* e : req.selected) stored += e->end_offset() - e->header_offset;
  if (o.range_bytes == 0) o.range_bytes = auto_range_bytes(stored, o.readers, align);
  req.plan = make_plan(req.selected, req.with_headers, {o.range_bytes, 64 << 10, align});
}

}  // namespace

// Checks a selection and the file's encryption mode; entries in file order.
static result<std::vector<const format::tensor_entry*>> select_entries(const format::file_index& index,
                                                                       std::vector<std::size_t> which,
                                                                       const load_options& options) {
  if (options.stage == nullptr || options.decryption != nullptr)
    TZ_CHECK(format::check_decryption_mode(index.header, options.decryption != nullptr, index.source));
  return select_in_file_order(index, std::move(which));
}

task<result<loaded_tensors>> loader::async_load(scheduler& sched, std::vector<std::size_t> which,
                                                load_options options) {
  auto t0 = clock_type::now();
  TZ_CO_TRY(selected, select_entries(*index_, std::move(which), options));  // empty: every tensor
  pipeline_request req;
  req.selected = std::move(selected);
  req.options = std::move(options);
  req.with_headers = kind_ == file_kind::tensorizer;
  plan_request(req, sched);

  // One allocation: the mirror of the selected runs, then zeros for meta tensors.
  std::uint64_t zero_offset = (req.plan.mirror_bytes + meta_align_bytes - 1) / meta_align_bytes * meta_align_bytes;
  std::uint64_t total = zero_offset;
  for (const auto* e : req.selected) {
    if (e->is_meta()) total += (e->deserialized_bytes + meta_align_bytes - 1) / meta_align_bytes * meta_align_bytes;
  }
  loaded_tensors out;
  try {
    out.memory_ = host_buffer(total, req.options.huge_pages);
  } catch (const std::bad_alloc&) {
    co_return make_error(errc::io, source_->name() + ": cannot map " + std::to_string(total) + " bytes for the load");
  }
  req.mirror_base = out.memory_.data();
  for (std::size_t slot = 0; slot < req.selected.size(); ++slot) {
    const auto& e = *req.selected[slot];
    std::span<std::byte> dst;
    if (e.data_length > 0) {
      dst = {req.mirror_base + req.plan.mirror_data_offset[slot], e.deserialized_bytes};
    } else if (e.is_meta()) {
      dst = {req.mirror_base + zero_offset, e.deserialized_bytes};  // the mapping starts zeroed
      zero_offset += (e.deserialized_bytes + meta_align_bytes - 1) / meta_align_bytes * meta_align_bytes;
    }
    req.data_dst.push_back(dst);
  }
  double prepare_s = seconds_since(t0);
  TZ_CO_TRY(timings, co_await run_pipeline(sched, req));
  out.timings_ = timings;
  out.timings_.open_s = open_s_;
  out.timings_.prepare_s = prepare_s;
  out.timings_.total_s = seconds_since(t0);
  out.entries_ = std::move(req.selected);
  for (const auto& d : req.data_dst) {
    out.views_.emplace_back(d.data(), d.size());
    out.bytes_ += d.size();
  }
  co_return out;
}

task<result<load_timings>> loader::async_load_into(scheduler& sched, std::vector<tensor_destination> dst,
                                                   load_options options) {
  auto t0 = clock_type::now();
  std::sort(dst.begin(), dst.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  std::vector<std::size_t> which;
  for (const auto& d : dst) which.push_back(d.index);
  TZ_CO_TRY(selected, select_entries(*index_, std::move(which), options));
  pipeline_request req;
  req.selected = std::move(selected);
  for (std::size_t slot = 0; slot < dst.size(); ++slot) {
    const auto& e = *req.selected[slot];
    if (dst[slot].bytes.size() != e.deserialized_bytes) {
      co_return make_error(errc::invalid_argument, source_->name() + ": destination for tensor " + e.name + " is " +
                                                       std::to_string(dst[slot].bytes.size()) + " bytes, expected " +
                                                       std::to_string(e.deserialized_bytes));
    }
    if (e.is_meta()) std::memset(dst[slot].bytes.data(), 0, dst[slot].bytes.size());
    req.data_dst.push_back(dst[slot].bytes);
  }
  req.options = std::move(options);
  req.with_headers = kind_ == file_kind::tensorizer;
  plan_request(req, sched);
  req.side.resize(req.plan.side_bytes);
  double prepare_s = seconds_since(t0);
  TZ_CO_TRY(timings, co_await run_pipeline(sched, req));
  timings.open_s = open_s_;
  timings.prepare_s = prepare_s;
  timings.total_s = seconds_since(t0);
  co_return timings;
}

task<result<loaded_tensors>> loader::async_load_tensor(scheduler& sched, std::size_t index, load_options options) {
  return async_load(sched, {index}, std::move(options));
}

result<loaded_tensors> loader::load(scheduler& sched, std::vector<std::size_t> which, load_options options) {
  return run(sched, async_load(sched, std::move(which), std::move(options)));
}

result<load_timings> loader::load_into(scheduler& sched, std::vector<tensor_destination> dst, load_options options) {
  return run(sched, async_load_into(sched, std::move(dst), std::move(options)));
}

loaded_tensors loader::load_or_throw(scheduler& sched, std::vector<std::size_t> which, load_options options) {
  return unwrap(load(sched, std::move(which), std::move(options)));
}

}  // namespace tz

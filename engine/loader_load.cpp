// Host loads: the pipeline with a host sink. Reads land straight in their destination, with no
// staging: loader-owned memory (a mirror of the file's selected stretches) or the caller's spans.
#include "pipeline.hpp"
#include "ready_order.hpp"

#include "tz/engine/host_memory.hpp"

#include <algorithm>
#include <cstring>
#include <new>

namespace tz {

namespace {

constexpr std::uint64_t meta_align_bytes = 64;

std::uint64_t align_up(std::uint64_t n, std::uint64_t a) { return (n + a - 1) / a * a; }

// Loader-owned layout: the file's planned stretches back to back, each at the same offset modulo
// 4 KiB as in the file, so a range lands as one span (O_DIRECT reads go straight in).
class mirror_layout {
 public:
  explicit mirror_layout(const load_plan& plan) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;  // file [begin, end) of each range
    for (const auto& r : plan.ranges) spans.emplace_back(r.offset_bytes, r.offset_bytes + r.length_bytes);
    std::sort(spans.begin(), spans.end());  // verified plans interleave ranges
    for (const auto& [begin, end] : spans) {
      if (!runs_.empty() && runs_.back().file_end == begin) {
        runs_.back().file_end = end;
        bytes_ += end - begin;
        continue;
      }
      const std::uint64_t base = align_up(bytes_, page_bytes) + begin % page_bytes;
      runs_.push_back({begin, end, base});
      bytes_ = base + (end - begin);
    }
  }
  // Where file byte `file_offset` (inside a planned range) lives.
  std::uint64_t at(std::uint64_t file_offset) const noexcept {
    auto it = std::upper_bound(runs_.begin(), runs_.end(), file_offset,
                               [](std::uint64_t off, const run& r) { return off < r.file_begin; });
    --it;
    return it->base + (file_offset - it->file_begin);
  }
  std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  struct run {
    std::uint64_t file_begin, file_end, base;
  };
  std::vector<run> runs_;
  std::uint64_t bytes_ = 0;
};

// The host sink: no room to reserve, nothing to deliver; bytes land where they stay.
class host_sink final : public sink {
 public:
  host_sink(const pipeline& p, const load_options& o) : p_(p), options_(o) {}

  // Loader-owned memory: ranges land at base + layout.at(offset).
  void use_mirror(std::byte* base, const mirror_layout* layout) {
    base_ = base;
    layout_ = layout;
  }
  // Caller memory: data lands in dst[tensor]; headers and gaps in a side buffer per range.
  void use_scatter(std::vector<std::span<std::byte>> dst) { dst_ = std::move(dst); }

  task<result<lease>> reserve() override { co_return lease{}; }

  void place(const load_range& r, landing& where) override {
    where.pieces.clear();
    if (base_ != nullptr) {
      where.whole = {base_ + layout_->at(r.offset_bytes), r.length_bytes};
      // Fault fresh 4 KiB pages here, right before the copy lands in them (one madvise instead of
      // a fault per page). Huge pages fault inside the copy: each 2 MiB page is zeroed and then
      // overwritten while still in cache (load_bench, pre-touched memory: 14.4-18.3 GB/s without
      // populating, 11.5-16.3 GB/s with).
      if (options_.prefault && !options_.huge_pages) prefault(where.whole);
      for (const plan_piece& piece : r.pieces)
        where.pieces.push_back(where.whole.subspan(piece.offset_bytes - r.offset_bytes, piece.length_bytes));
      return;
    }
    where.whole = {};
    std::uint64_t side = 0;
    for (const plan_piece& piece : r.pieces) side += piece.what == plan_piece::kind::data ? 0 : piece.length_bytes;
    where.side.resize(side);
    side = 0;
    for (const plan_piece& piece : r.pieces) {
      if (piece.what == plan_piece::kind::data) {
        const auto& e = *p_.selected[piece.tensor];
        where.pieces.push_back(dst_[piece.tensor].subspan(piece.offset_bytes - e.data_offset, piece.length_bytes));
      } else {
        where.pieces.push_back(std::span<std::byte>(where.side).subspan(side, piece.length_bytes));
        side += piece.length_bytes;
      }
    }
  }

  // The bytes are where they stay: the range's tensors are that much nearer ready.
  result<void> deliver(const load_range& r, landing&, std::int64_t) override {
    if (p_.ready) p_.ready->range_done(r);
    return {};
  }
  task<void> drain() override { co_return; }

 private:
  const pipeline& p_;
  const load_options& options_;
  std::byte* base_ = nullptr;
  const mirror_layout* layout_ = nullptr;
  std::vector<std::span<std::byte>> dst_;
};

}  // namespace

// Tensors as they land, when the load's caller asked for them (null otherwise); `describe` says
// where tensor t is.
std::unique_ptr<ready_order> ready_for(pipeline& p, pipeline_clock::time_point started, ready_order::describe_fn describe) {
  if (!p.options->on_tensor_ready) return nullptr;
  auto ready = std::make_unique<ready_order>(p, std::move(describe), started);
  p.ready = ready.get();
  return ready;
}

// The host loads, befriended by loader and loaded_tensors.
struct host_load {
  // Selection, encryption mode, knobs, header pass and plan.
  static task<result<void>> prepare(scheduler& sched, const loader& l, pipeline& p, std::vector<std::size_t> which,
                                    load_options& o) {
    p.index = l.index_.get();
    p.source = l.source_.get();
    p.options = &o;
    p.keep_headers = o.keep_headers;
    p.with_headers = l.kind_ == file_kind::tensorizer;
    p.encrypted = p.with_headers && p.index->header.has_crypt_info();
    if (p.with_headers) TZ_CO_CHECK(format::check_decryption_mode(p.index->header, o.decryption.has_value(), p.source->name()));
    TZ_CO_TRY(selected, select_in_file_order(*p.index, std::move(which)));
    p.selected = std::move(selected);
    if (o.readers == 0) o.readers = default_readers(sched, *p.source);
    if (o.range_bytes == 0) o.range_bytes = auto_range_bytes(p, o.readers);
    plan_options popts;
    popts.range_bytes = o.range_bytes;
    co_return co_await prepare_plan(sched, p, popts, o.readers);
  }

  static load_timings timings(const pipeline& p, double prepare_s, double transfer_s, double open_s) {
    load_timings t;
    t.open_s = open_s;
    t.prepare_s = prepare_s;
    t.transfer_s = transfer_s;
    t.total_s = prepare_s + transfer_s;
    t.read_s = seconds_of(p.counters.read_ns);
    t.verify_s = seconds_of(p.counters.verify_ns);
    t.decrypt_s = seconds_of(p.counters.decrypt_ns);
    return t;
  }

  static task<result<loaded_tensors>> own_memory(const loader& l, scheduler& sched, std::vector<std::size_t> which,
                                                 load_options o);
  static task<result<load_timings>> caller_memory(const loader& l, scheduler& sched, std::vector<tensor_destination> dst,
                                                  load_options o);
};

task<result<loaded_tensors>> host_load::own_memory(const loader& l, scheduler& sched, std::vector<std::size_t> which,
                                                   load_options o) {
  const auto t0 = pipeline_clock::now();
  pipeline p;
  TZ_CO_CHECK(co_await prepare(sched, l, p, std::move(which), o));
  // One allocation: the mirror of the planned stretches, then zeros for meta tensors.
  const mirror_layout layout(p.plan);
  std::uint64_t zero_offset = align_up(layout.bytes(), meta_align_bytes);
  std::uint64_t total = zero_offset;
  for (const auto* e : p.selected) {
    if (!e->is_meta()) continue;
    // A meta tensor's size comes from its shape alone (u64 dimensions since data version 5): a sum
    // that wraps would map too little and hand out views past the mapping.
    if (e->deserialized_bytes > UINT64_MAX - meta_align_bytes - total)
      co_return make_error(errc::unsupported, l.source_->name() + ": tensor '" + format::display_name(e->path) +
                                                  "' is a meta tensor of " + std::to_string(e->deserialized_bytes) +
                                                  " bytes of zeros: the load would need more than 2^64 bytes");
    total += align_up(e->deserialized_bytes, meta_align_bytes);
  }
  loaded_tensors out;
  try {
    out.memory_ = std::make_shared<host_buffer>(total, o.huge_pages);
  } catch (const std::bad_alloc&) {
    co_return make_error(errc::io, l.source_->name() + ": cannot map " + std::to_string(total) + " bytes for the load");
  }
  std::byte* base = out.memory_->data();
  for (const auto* e : p.selected) {
    std::span<const std::byte> view;
    if (e->data_length > 0) {
      view = {base + layout.at(e->data_offset), e->deserialized_bytes};
    } else if (e->is_meta()) {
      view = {base + zero_offset, e->deserialized_bytes};  // the mapping starts zeroed
      zero_offset += align_up(e->deserialized_bytes, meta_align_bytes);
    }
    out.views_.push_back(view);
    out.bytes_ += view.size();
  }
  host_sink to(p, o);
  to.use_mirror(base, &layout);
  p.out = &to;
  auto ready = ready_for(p, t0, [&out](std::uint32_t t) {
    return tensor_ready{.host = out.views_[t], .owner = out.memory_};
  });
  const double prepare_s = seconds_of(nanoseconds_since(t0));
  const auto t1 = pipeline_clock::now();
  TZ_CO_CHECK(co_await run_pipeline(sched, p, o.readers));
  out.timings_ = timings(p, prepare_s, seconds_of(nanoseconds_since(t1)), l.open_s_);
  out.data_bytes_ = p.plan.data_bytes;
  out.readers_ = o.readers;  // prepare() chose it for 0
  out.headers_ = std::move(p.headers);
  out.entries_ = std::move(p.selected);
  out.index_base_ = p.index->tensors.data();
  co_return out;
}

task<result<load_timings>> host_load::caller_memory(const loader& l, scheduler& sched,
                                                    std::vector<tensor_destination> dst, load_options o) {
  const auto t0 = pipeline_clock::now();
  std::sort(dst.begin(), dst.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  std::vector<std::size_t> which;
  for (const auto& d : dst) which.push_back(d.index);
  if (which.empty()) co_return timings(pipeline{}, 0, 0, l.open_s_);  // nothing asked for (empty = all elsewhere)
  pipeline p;
  TZ_CO_CHECK(co_await prepare(sched, l, p, std::move(which), o));
  std::vector<std::span<std::byte>> spans;
  for (std::size_t i = 0; i < dst.size(); ++i) {
    const auto& e = *p.selected[i];
    if (dst[i].bytes.size() != e.deserialized_bytes) {
      co_return make_error(errc::invalid_argument, l.source_->name() + ": destination for tensor " + e.name + " is " +
                                                       std::to_string(dst[i].bytes.size()) + " bytes, expected " +
                                                       std::to_string(e.deserialized_bytes));
    }
    if (e.is_meta()) std::memset(dst[i].bytes.data(), 0, dst[i].bytes.size());
    spans.push_back(dst[i].bytes);
  }
  auto ready = ready_for(p, t0, [&spans](std::uint32_t t) { return tensor_ready{.host = spans[t]}; });
  host_sink to(p, o);
  to.use_scatter(spans);
  p.out = &to;
  const double prepare_s = seconds_of(nanoseconds_since(t0));
  const auto t1 = pipeline_clock::now();
  TZ_CO_CHECK(co_await run_pipeline(sched, p, o.readers));
  co_return timings(p, prepare_s, seconds_of(nanoseconds_since(t1)), l.open_s_);
}

task<result<std::vector<format::tensor_header>>> loader::async_read_headers(scheduler& sched,
                                                                            std::vector<std::size_t> which,
                                                                            unsigned readers) const {
  if (kind_ != file_kind::tensorizer)
    co_return make_error(errc::unsupported, source_->name() + ": a safetensors file has no per-tensor headers");
  load_options o;
  pipeline p;
  p.index = index_.get();
  p.source = source_.get();
  p.options = &o;
  TZ_CO_TRY(selected, select_in_file_order(*p.index, std::move(which)));
  p.selected = std::move(selected);
  TZ_CO_CHECK(co_await tz::read_headers(sched, p, readers ? readers : default_readers(sched, *p.source)));
  co_return std::move(p.headers);
}

result<std::vector<format::tensor_header>> loader::read_headers(scheduler& sched, std::vector<std::size_t> which) const {
  return run(sched, async_read_headers(sched, std::move(which)));
}

task<result<loaded_tensors>> loader::async_load(scheduler& sched, std::vector<std::size_t> which,
                                                load_options options) {
  return host_load::own_memory(*this, sched, std::move(which), std::move(options));
}

task<result<load_timings>> loader::async_load_into(scheduler& sched, std::vector<tensor_destination> dst,
                                                   load_options options) {
  return host_load::caller_memory(*this, sched, std::move(dst), std::move(options));
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

// Partial loads (partial_load.hpp): whole tensors through the usual plan, parts of tensors through
// a plan of their own (plain stretches coalesced, encrypted ones widened to whole cipher chunks),
// both run by the one pipeline with a sink that lands bytes in the caller's spans (here) or, through
// a pinned ring, in caller device memory (partial_device.cpp).
#include "extent_sink.hpp"

#include "tz/format/encryption.hpp"

#include <algorithm>
#include <cstring>

namespace tz {

namespace {

constexpr std::size_t max_pieces_per_range = 256;  // well under IOV_MAX for one readv

// Host memory: the caller's spans are written by the reads themselves; a staged range lands in the
// side buffer and its parts are copied out after its checks.
class host_extent_sink final : public extent_sink {
 public:
  using extent_sink::extent_sink;

  task<result<lease>> reserve() override { co_return lease{}; }

  void place(const load_range& r, landing& where) override {
    where.pieces.clear();
    where.whole = {};
    const range_target* t = target_of(r);
    if (t != nullptr && t->staged) {
      where.side.resize(r.length_bytes);
      where.whole = where.side;
      where.pieces.push_back(where.whole);
      return;
    }
    std::uint64_t side = 0;
    for (std::size_t k = 0; k < r.pieces.size(); ++k) side += destination(r, k, t) ? 0 : r.pieces[k].length_bytes;
    where.side.resize(side);
    side = 0;
    for (std::size_t k = 0; k < r.pieces.size(); ++k) {
      const plan_piece& piece = r.pieces[k];
      if (std::byte* d = destination(r, k, t)) {
        where.pieces.emplace_back(d, piece.length_bytes);
      } else {
        where.pieces.push_back(std::span<std::byte>(where.side).subspan(side, piece.length_bytes));
        side += piece.length_bytes;
      }
    }
  }

  result<void> deliver(const load_range& r, landing& where, std::int64_t) override {
    if (const range_target* t = target_of(r))
      for (const auto& [at, dst] : t->copy_out) std::memcpy(dst.data(), where.whole.data() + at, dst.size());
    return {};
  }
  task<void> drain() override { co_return; }
  result<void> zero(std::span<std::byte> dst) override {
    if (!dst.empty()) std::memset(dst.data(), 0, dst.size());
    return {};
  }
};

result<void> begin_pipeline(const loader& l, pipeline& p, const extent_options& o) {
  p.index = &l.index();
  p.source = l.shared_source().get();
  p.options = &o;
  p.with_headers = l.kind() == file_kind::tensorizer;
  p.encrypted = p.with_headers && p.index->header.has_crypt_info();
  if (p.with_headers) TZ_CHECK(format::check_decryption_mode(p.index->header, o.decryption.has_value(), p.source->name()));
  return {};
}

// Runs the planned pipeline and adds its timings (prepare: from t0 until now) and read bytes to
// `out`: the tail both kinds of extent load share.
task<result<void>> run_and_add(scheduler& sched, pipeline& p, unsigned readers, pipeline_clock::time_point t0,
                               extent_load_result& out) {
  const double prepare_s = seconds_of(nanoseconds_since(t0));
  const auto t1 = pipeline_clock::now();
  TZ_CO_CHECK(co_await run_pipeline(sched, p, readers));
  const double transfer_s = seconds_of(nanoseconds_since(t1));
  load_timings& sum = out.timings;
  sum.prepare_s += prepare_s;
  sum.transfer_s += transfer_s;
  sum.total_s += prepare_s + transfer_s;
  sum.read_s += seconds_of(p.counters.read_ns);
  sum.verify_s += seconds_of(p.counters.verify_ns);
  sum.decrypt_s += seconds_of(p.counters.decrypt_ns);
  out.read_bytes += p.plan.read_bytes;
  co_return result<void>{};
}

// Whole tensors: the usual plan (split tensors, header checks, verification), landing in the spans.
task<result<void>> load_whole(scheduler& sched, const loader& l, std::vector<tensor_extent> whole,
                              const extent_options& o, const extent_sink_maker& make, extent_plan_limits limits,
                              extent_load_result& out) {
  const auto t0 = pipeline_clock::now();
  std::sort(whole.begin(), whole.end(), [](const auto& a, const auto& b) { return a.part.index < b.part.index; });
  std::vector<std::size_t> which;
  for (const auto& x : whole) which.push_back(x.part.index);
  pipeline p;
  TZ_CO_CHECK(begin_pipeline(l, p, o));
  TZ_CO_TRY(selected, select_in_file_order(*p.index, std::move(which)));
  p.selected = std::move(selected);
  plan_options popts;
  popts.range_bytes = std::min(o.range_bytes ? o.range_bytes : auto_range_bytes(p, o.readers), limits.range_limit_bytes);
  popts.range_limit_bytes = limits.range_limit_bytes;
  TZ_CO_CHECK(co_await prepare_plan(sched, p, popts, o.readers));
  auto to = make(p);
  for (std::size_t i = 0; i < whole.size(); ++i) {
    if (p.selected[i]->is_meta()) TZ_CO_CHECK(to->zero(whole[i].bytes));
    to->whole.push_back(whole[i].bytes);
  }
  p.out = to.get();
  co_return co_await run_and_add(sched, p, o.readers, t0, out);
}

// The ranges of plain parts of selected tensor t (sorted by offset): each part cut to range_bytes,
// then neighbours closer than gap_merge_bytes read as one (the bytes between into the side buffer).
void plan_plain_parts(pipeline& p, std::uint32_t t, const std::vector<tensor_extent>& parts, const extent_options& o,
                      std::uint64_t range_bytes, std::vector<range_target>& targets) {
  const auto& e = *p.selected[t];
  load_range* cur = nullptr;
  for (const auto& x : parts) {
    for (std::uint64_t done = 0; done < x.part.length_bytes;) {
      const std::uint64_t n = std::min(range_bytes, x.part.length_bytes - done);
      const std::uint64_t at = e.data_offset + x.part.data_begin_bytes + done;
      std::byte* dst = x.bytes.data() + done;
      const bool joins = cur != nullptr && at >= cur->offset_bytes + cur->length_bytes &&
                         at - (cur->offset_bytes + cur->length_bytes) <= o.gap_merge_bytes &&
                         at + n - cur->offset_bytes <= range_bytes && cur->pieces.size() + 2 <= max_pieces_per_range;
      if (!joins) {
        p.plan.ranges.push_back({at, 0, {}, t, static_cast<std::uint32_t>(p.plan.ranges.size())});
        targets.emplace_back();
        cur = &p.plan.ranges.back();
      }
      range_target& target = targets.back();
      const std::uint64_t end = cur->offset_bytes + cur->length_bytes;
      if (at > end) {
        cur->pieces.push_back({plan_piece::kind::gap, t, end, at - end, 0});
        target.piece_dst.push_back(nullptr);
      }
      cur->pieces.push_back({plan_piece::kind::data, t, at, n, at - e.data_offset});
      target.piece_dst.push_back(dst);
      cur->length_bytes = at + n - cur->offset_bytes;
      done += n;
    }
  }
}

// The ranges of encrypted parts of selected tensor t: each part widened to the whole cipher chunks
// holding it, overlapping widenings merged, cut at chunk multiples; each range is staged, decrypted
// by the pipeline's checks, and its parts copied out.
void plan_cipher_parts(pipeline& p, std::uint32_t t, const std::vector<tensor_extent>& parts, std::uint64_t chunk,
                       std::uint64_t range_bytes, std::vector<range_target>& targets) {
  const auto& e = *p.selected[t];
  std::vector<std::pair<std::uint64_t, std::uint64_t>> runs;  // data [begin, end), chunk-aligned
  for (const auto& x : parts) {
    const std::uint64_t a = x.part.data_begin_bytes / chunk * chunk;
    const std::uint64_t b = std::min(e.data_length, (x.part.data_begin_bytes + x.part.length_bytes - 1) / chunk * chunk + chunk);
    if (!runs.empty() && a <= runs.back().second) runs.back().second = std::max(runs.back().second, b);
    else runs.emplace_back(a, b);
  }
  const std::uint64_t step = std::max(chunk, range_bytes / chunk * chunk);
  for (const auto& [a, b] : runs) {
    for (std::uint64_t ra = a; ra < b; ra += step) {
      const std::uint64_t rb = std::min(b, ra + step);
      load_range r{e.data_offset + ra, rb - ra, {}, t, static_cast<std::uint32_t>(p.plan.ranges.size())};
      r.pieces.push_back({plan_piece::kind::data, t, r.offset_bytes, r.length_bytes, ra});
      range_target target;
      target.staged = true;
      target.piece_dst.push_back(nullptr);
      for (const auto& x : parts) {
        const std::uint64_t xa = x.part.data_begin_bytes, xb = xa + x.part.length_bytes;
        const std::uint64_t lo = std::max(xa, ra), hi = std::min(xb, rb);
        if (lo < hi) target.copy_out.emplace_back(lo - ra, x.bytes.subspan(lo - xa, hi - lo));
      }
      p.plan.ranges.push_back(std::move(r));
      targets.push_back(std::move(target));
    }
  }
}

// Parts of tensors: their headers (keys, chunk sizes) first, then a plan of their own.
task<result<void>> load_parts(scheduler& sched, const loader& l, std::vector<tensor_extent> parts,
                              const extent_options& o, const extent_sink_maker& make, extent_plan_limits limits,
                              extent_load_result& out) {
  const auto t0 = pipeline_clock::now();
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) {
    return std::pair(a.part.index, a.part.data_begin_bytes) < std::pair(b.part.index, b.part.data_begin_bytes);
  });
  std::vector<std::size_t> which;
  for (const auto& x : parts)
    if (which.empty() || which.back() != x.part.index) which.push_back(x.part.index);
  pipeline p;
  TZ_CO_CHECK(begin_pipeline(l, p, o));
  TZ_CO_TRY(selected, select_in_file_order(*p.index, std::move(which)));
  p.selected = std::move(selected);
  if (p.with_headers) TZ_CO_CHECK(co_await read_headers(sched, p, o.readers));
  const std::uint64_t range_bytes =
      std::min(o.range_bytes ? o.range_bytes : auto_range_bytes(p, o.readers), limits.range_limit_bytes);
  auto to = make(p);
  p.splits.resize(p.selected.size());
  auto next = parts.begin();
  for (std::uint32_t t = 0; t < p.selected.size(); ++t) {
    const std::size_t index = static_cast<std::size_t>(p.selected[t] - p.index->tensors.data());
    std::vector<tensor_extent> mine;
    for (; next != parts.end() && next->part.index == index; ++next) mine.push_back(*next);
    auto& s = *(p.splits[t] = std::make_unique<split_state>());
    if (p.with_headers) s.header = p.headers[t];
    if (p.selected[t]->is_meta()) {
      for (const auto& x : mine) TZ_CO_CHECK(to->zero(x.bytes));
      continue;
    }
    if (p.encrypted) {
      TZ_CO_TRY(key, o.decryption->key_for(s.header, p.source->name()));
      s.key = std::move(key);
      const std::uint64_t chunk = format::cipher_chunk_bytes(s.header);
      if (chunk > limits.range_limit_bytes)
        co_return make_error(errc::unsupported, p.source->name() + ": tensor " + p.selected[t]->name + ": its cipher chunks of " +
                                                    std::to_string(chunk) + " bytes do not fit a staging slot of " +
                                                    std::to_string(limits.range_limit_bytes) + " bytes");
      plan_cipher_parts(p, t, mine, chunk, range_bytes, to->targets);
    } else {
      plan_plain_parts(p, t, mine, o, range_bytes, to->targets);
    }
  }
  for (const auto& r : p.plan.ranges) p.plan.read_bytes += r.length_bytes;
  p.out = to.get();
  co_return co_await run_and_add(sched, p, o.readers, t0, out);
}

}  // namespace

task<result<extent_load_result>> run_extents(scheduler& sched, const loader& l, std::vector<tensor_extent> extents,
                                             extent_options o, const extent_sink_maker& make, extent_plan_limits limits) {
  const auto& index = l.index();
  const std::string& name = l.source().name();
  if (o.readers == 0) o.readers = default_readers(sched, l.source());
  std::vector<tensor_extent> whole, parts;
  extent_load_result out;
  out.timings.open_s = l.open_seconds();
  for (const auto& x : extents) {
    if (x.part.index >= index.tensors.size())
      co_return make_error(errc::invalid_argument, name + ": tensor index " + std::to_string(x.part.index) + " out of range");
    const auto& e = index.tensors[x.part.index];
    const std::uint64_t end = x.part.data_begin_bytes + x.part.length_bytes;
    if (end < x.part.data_begin_bytes || end > e.deserialized_bytes || x.bytes.size() != x.part.length_bytes) {
      co_return make_error(errc::invalid_argument,
                           name + ": tensor " + e.name + ": part [" + std::to_string(x.part.data_begin_bytes) + ", " +
                               std::to_string(end) + ") of its " + std::to_string(e.deserialized_bytes) +
                               " bytes into a destination of " + std::to_string(x.bytes.size()) + " bytes");
    }
    if (x.part.length_bytes == 0) continue;
    out.data_bytes += x.part.length_bytes;
    if (x.part.whole(e)) {
      whole.push_back(x);
      continue;
    }
    if (o.verify) {
      co_return make_error(errc::unsupported,
                           name + ": tensor " + e.name + ": cannot verify a partial read (bytes [" +
                               std::to_string(x.part.data_begin_bytes) + ", " + std::to_string(end) + ") of " +
                               std::to_string(e.deserialized_bytes) +
                               "): its stored hash covers the whole tensor; read it whole, or load without verify");
    }
    parts.push_back(x);
  }
  if (!whole.empty()) TZ_CO_CHECK(co_await load_whole(sched, l, std::move(whole), o, make, limits, out));
  if (!parts.empty()) TZ_CO_CHECK(co_await load_parts(sched, l, std::move(parts), o, make, limits, out));
  co_return out;
}

task<result<extent_load_result>> async_load_extents(scheduler& sched, const loader& l, std::vector<tensor_extent> extents,
                                                    extent_options o) {
  const extent_sink_maker host = [](pipeline& p) -> std::unique_ptr<extent_sink> { return std::make_unique<host_extent_sink>(p); };
  co_return co_await run_extents(sched, l, std::move(extents), std::move(o), host);
}

result<extent_load_result> load_extents(scheduler& sched, const loader& l, std::vector<tensor_extent> extents,
                                        extent_options options) {
  return run(sched, async_load_extents(sched, l, std::move(extents), std::move(options)));
}

}  // namespace tz

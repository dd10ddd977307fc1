// The one load pipeline: selection and the header pass, the plan, and the readers that pull ranges,
// read them where the sink puts them, check them and hand them to the sink.
#include "pipeline.hpp"
#include "ready_order.hpp"

#include "tz/engine/load_trace.hpp"

#include "tz/engine/wait_group.hpp"

#include <boost/asio/co_spawn.hpp>

#include <algorithm>

namespace tz {

void pipeline::fail(error e) noexcept {
  {
    std::lock_guard lock(error_mutex);
    if (!first_error) first_error = std::move(e);
  }
  failed = true;
  for (auto& s : splits) {
    if (s) s->turns.abort();
  }
  if (observed)
    for (auto& c : observed->chains) c->turns.abort();
}

namespace {

// A reader should only fail through result values; anything thrown (bad_alloc, a bug) still ends
// the load with an error naming the source rather than a crash.
error unexpected_failure(const std::string& source, std::exception_ptr e) {
  return make_error(errc::io, source + ": a reader failed: " + describe_exception(std::move(e)));
}

// Runs `body(p)` on `count` coroutines spread round-robin over the workers; completes when all
// have finished. A throwing body fails the load.
template <class Body>
task<void> run_on_workers(scheduler& sched, pipeline& p, unsigned count, Body body) {
  co_await tz::run_on_workers(sched, count, [&p, &body](std::size_t) { return body(p); },
                              [&p](std::size_t, std::exception_ptr e) { p.fail(unexpected_failure(p.source->name(), e)); });
}

// Reads and parses one tensor's header (a small read, checked against the index entry).
task<result<format::tensor_header>> read_header(pipeline& p, std::uint32_t tensor) {
  const format::tensor_entry& e = *p.selected[tensor];
  const std::string& name = p.source->name();
  if (e.header_bytes() > format::max_tensor_header_bytes) {
    co_return make_error(errc::format, name + ": tensor " + e.name + " at offset " + std::to_string(e.header_offset) +
                                           ": header of " + std::to_string(e.header_bytes()) + " bytes exceeds " +
                                           std::to_string(format::max_tensor_header_bytes));
  }
  std::vector<std::byte> bytes(e.header_bytes());
  std::span<std::byte> one[1] = {bytes};
  TZ_CO_CHECK(co_await p.source->read(e.header_offset, one));
  co_return format::parse_tensor_header(bytes, p.index->header, e, name);
}

// One header worker: takes tensors of `todo` in turn (`next`), reads and checks each header and
// hands it to `keep(t, header)` (distinct tensors, so no two workers store into the same place).
// A failure fails the load.
template <class Keep>
task<void> header_worker(pipeline& p, const std::vector<std::uint32_t>& todo, std::atomic<std::size_t>& next, Keep& keep) {
  for (std::size_t i; !p.failed && (i = next.fetch_add(1)) < todo.size();) {
    auto h = co_await read_header(p, todo[i]);
    auto kept = h ? keep(todo[i], std::move(*h)) : result<void>(h.error());
    if (!kept) p.fail(kept.error());
  }
}

// Reads the headers of tensors `todo` on up to `readers` workers. The first error is returned.
template <class Keep>
task<result<void>> read_headers_of(scheduler& sched, pipeline& p, const std::vector<std::uint32_t>& todo,
                                   unsigned readers, Keep keep) {
  std::atomic<std::size_t> next{0};
  auto body = [&todo, &next, &keep](pipeline& q) { return header_worker(q, todo, next, keep); };
  if (!todo.empty()) co_await run_on_workers(sched, p, std::clamp<unsigned>(readers, 1, todo.size()), body);
  if (p.first_error) co_return *p.first_error;
  co_return result<void>{};
}

// What the header pass keeps of a split tensor's header: its key, its hash state, the header.
result<void> keep_split_header(pipeline& p, std::uint32_t t, format::tensor_header h) {
  split_state& s = *p.splits[t];
  if (p.encrypted) {
    TZ_TRY(key, p.options->decryption->key_for(h, p.source->name()));
    s.key = std::move(key);
  }
  if (p.options->verify) s.sha.emplace();
  if (!p.headers.empty()) p.headers[t] = h;
  s.header = std::move(h);
  return {};
}

// The header pass: headers of the tensors that will be split, read in parallel, keyed. Returns each
// selected tensor's split alignment (cipher chunk of encrypted split tensors, else whole pages).
// A plain, unverified load needs none of them to plan or to check its data: their reads are left
// to run_pipeline, beside the data (p.deferred_headers). Against a remote source the pass cost a
// round trip before the first data byte: 80 ms of a 1.7 s load at the far profile.
task<result<std::vector<std::uint64_t>>> read_split_headers(scheduler& sched, pipeline& p, const plan_options& popts,
                                                            unsigned readers) {
  std::vector<std::uint64_t> align(p.selected.size(), plain_split_align_bytes);
  p.splits.resize(p.selected.size());
  std::vector<std::uint32_t> todo;
  for (std::uint32_t t = 0; t < p.selected.size(); ++t) {
    if (!needs_split(*p.selected[t], popts)) continue;
    p.splits[t] = std::make_unique<split_state>();
    if (p.with_headers) todo.push_back(t);
  }
  // Not when tensors are handed over as they land: the checks beside the data share the workers
  // with the readers, which on a fast source (page cache) keep them until the data is all read, so
  // every handover waited for the end (stream_bench: the first of 32 layers ready at 108 ms of a
  // 110 ms load). The pass costs a round trip remotely; the first tensor waits that long, no more.
  if (!p.encrypted && !p.options->verify && !p.options->on_tensor_ready) {
    p.deferred_headers = std::move(todo);
    co_return align;
  }
  TZ_CO_CHECK(co_await read_headers_of(sched, p, todo, readers, [&p](std::uint32_t t, format::tensor_header h) {
    return keep_split_header(p, t, std::move(h));
  }));
  for (std::uint32_t t : todo) {
    if (p.encrypted) align[t] = format::cipher_chunk_bytes(p.splits[t]->header);
  }
  co_return align;
}

// Sizes each split tensor's per-part hash state from the plan.
void size_split_parts(pipeline& p) {
  for (const load_range& r : p.plan.ranges) {
    if (r.split_tensor == no_split) continue;
    split_state& s = *p.splits[r.split_tensor];
    if (s.part_bytes.size() <= r.part) {
      s.part_bytes.resize(r.part + 1);
      s.part_crc.resize(r.part + 1);
    }
    s.part_bytes[r.part] = r.length_bytes;
  }
}

void report_progress(pipeline& p, std::uint64_t range_bytes) {
  const std::uint64_t done = p.bytes_done.fetch_add(range_bytes, std::memory_order_relaxed) + range_bytes;
  if (!p.options->on_progress) return;
  std::lock_guard lock(p.progress_mutex);
  p.options->on_progress({done, p.plan.read_bytes, p.tensors_done.load(), p.selected.size()});
}

// One range, in the room reserve() gave: read it where the sink places it, check it, deliver it.
task<result<void>> process_range(pipeline& p, const load_range& r, landing& where, std::int64_t index) {
  p.out->place(r, where);
  const auto t0 = pipeline_clock::now();
  std::span<std::byte> one[1] = {where.whole};
  if (!where.whole.empty()) {
    TZ_CO_CHECK(co_await p.source->read(r.offset_bytes, one));
  } else {
    TZ_CO_CHECK(co_await p.source->read(r.offset_bytes, where.pieces));
  }
  const auto t1 = pipeline_clock::now();
  p.counters.read_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  if (p.observed) TZ_CO_CHECK(co_await observe_range(p, r, where, static_cast<std::size_t>(index)));
  TZ_CO_CHECK(co_await check_range(p, r, where));
  const auto t2 = pipeline_clock::now();
  TZ_CO_CHECK(p.out->deliver(r, where, index));
  if (auto* trace = p.options->trace.get()) {
    trace->span("read", t0, t1, index, r.offset_bytes, r.length_bytes);
    if (p.with_headers) trace->span("check", t1, t2, index, r.offset_bytes, r.length_bytes);
    trace->span("deliver", t2, pipeline_clock::now(), index, r.offset_bytes, r.length_bytes);
  }
  report_progress(p, r.length_bytes);
  co_return result<void>{};
}

task<void> reader(pipeline& p) {
  landing where;  // reused: a scattered range's side buffer keeps its capacity
  while (!p.failed.load(std::memory_order_relaxed)) {
    const auto t0 = pipeline_clock::now();
    auto room = co_await p.out->reserve();
    if (auto* trace = p.options->trace.get(); trace && room && room->bytes().data() != nullptr)
      trace->span("wait for a ring slot", t0, pipeline_clock::now());
    if (!room) {
      p.fail(room.error());
      break;
    }
    const std::size_t i = p.next_range.fetch_add(1, std::memory_order_relaxed);
    if (i >= p.plan.ranges.size()) break;
    where.held = std::move(*room);
    auto ok = co_await process_range(p, p.plan.ranges[i], where, static_cast<std::int64_t>(i));
    where.held.reset();  // a failed range's slot (a delivered one travels with its upload)
    if (!ok) {
      p.fail(ok.error());
      break;
    }
  }
}

}  // namespace

unsigned default_readers(const scheduler& sched, const byte_source& source) noexcept {
  return std::max(2 * sched.thread_count(), source.read_concurrency());
}

std::uint64_t auto_range_bytes(const pipeline& p, unsigned readers) noexcept {
  const std::uint64_t per_reader = p.source->read_concurrency() != 0 ? 2 : 4;
  const std::uint64_t target =
      std::clamp<std::uint64_t>(stored_bytes(p) / (std::uint64_t{std::max(readers, 1u)} * per_reader), 1 << 20, 16 << 20);
  return target / (64 << 10) * (64 << 10);
}

std::uint64_t stored_bytes(const pipeline& p) noexcept {
  std::uint64_t n = 0;
  for (const auto* e : p.selected) n += e->end_offset() - (p.with_headers ? e->header_offset : e->data_offset);
  return n;
}

task<result<void>> read_headers(scheduler& sched, pipeline& p, unsigned readers) {
  p.headers.assign(p.selected.size(), {});
  std::vector<std::uint32_t> todo(p.selected.size());
  for (std::uint32_t t = 0; t < todo.size(); ++t) todo[t] = t;
  co_return co_await read_headers_of(sched, p, todo, readers, [&p](std::uint32_t t, format::tensor_header h) -> result<void> {
    p.headers[t] = std::move(h);
    return {};
  });
}

task<result<void>> prepare_plan(scheduler& sched, pipeline& p, plan_options popts, unsigned readers) {
  popts.with_headers = p.with_headers;
  if (p.options->observe) p.observed = std::make_unique<observed_bytes>();
  // Tensors as they land from a remote source: the first wave of reads short (1 MiB), so the first
  // tensors are whole after one short round trip each (stream_bench: the first of 16 layers ready
  // at 52% of a cloud-profile load with every read ~8 MiB long).
  if (p.options->on_tensor_ready && p.source->read_concurrency() != 0 && !p.selected.empty()) {
    popts.ramp_range_bytes = std::min<std::uint64_t>(popts.range_bytes, 1 << 20);
    const auto* first = p.selected.front();
    popts.ramp_until_offset = (p.with_headers ? first->header_offset : first->data_offset) +
                              std::uint64_t{std::max(readers, 1u)} * popts.ramp_range_bytes;
  }
  if (p.keep_headers && p.with_headers) p.headers.assign(p.selected.size(), {});
  const auto t0 = pipeline_clock::now();
  TZ_CO_TRY(align, co_await read_split_headers(sched, p, popts, readers));
  const auto t1 = pipeline_clock::now();
  TZ_CO_TRY(plan, make_plan(p.selected, align, popts));
  p.plan = std::move(plan);
  if (auto* trace = p.options->trace.get()) {
    if (p.deferred_headers.empty()) trace->span("read the split tensors' headers", t0, t1);  // else beside the data
    trace->span("plan the ranges", t1, pipeline_clock::now());
  }
  size_split_parts(p);
  for (const auto* e : p.selected) {  // nothing to read or check: done already
    if (!p.with_headers && e->data_length == 0) p.tensors_done.fetch_add(1, std::memory_order_relaxed);
  }
  // A split tensor's SHA-256 is fed in part order: let several tensors advance at once.
  // Longest first finishes the long hash chains sooner, but a caller taking tensors in file order as
  // they land wants the first ones first.
  const bool in_order = p.options->on_tensor_ready && p.options->ready_in_file_order;
  // An observed load takes its ranges in file order: its observer hashes them in that order.
  if (p.options->verify && !p.observed)
    interleave_split_tensors(p.plan, readers, p.options->verify_longest_first && !in_order);
  co_return result<void>{};
}

task<result<void>> run_pipeline(scheduler& sched, pipeline& p, unsigned readers) {
  readers = static_cast<unsigned>(std::clamp<std::size_t>(readers, 1, std::max<std::size_t>(1, p.plan.ranges.size())));
  if (p.options->observe && !p.observed) p.observed = std::make_unique<observed_bytes>();  // plans of their own
  if (p.observed) TZ_CO_CHECK(co_await plan_observation(p, readers));
  // The deferred header checks run beside the readers, on a quarter as many coroutines of their own.
  const auto& todo = p.deferred_headers;
  const std::size_t checkers = todo.empty() ? 0 : std::clamp<std::size_t>(readers / 4, 1, todo.size());
  const std::size_t data = p.plan.ranges.empty() ? 0 : readers;
  std::atomic<std::size_t> next{0};
  if (p.ready) p.ready->start();  // what has no bytes to wait for
  auto keep = [&p](std::uint32_t t, format::tensor_header h) {
    auto kept = keep_split_header(p, t, std::move(h));
    if (kept && p.ready) p.ready->unit_done(t);
    return kept;
  };
  if (data + checkers != 0)
    co_await tz::run_on_workers(
        sched, data + checkers,
        [&](std::size_t k) { return k < data ? reader(p) : header_worker(p, todo, next, keep); },
        [&p](std::size_t, std::exception_ptr e) { p.fail(unexpected_failure(p.source->name(), e)); });
  if (p.observed && !p.failed.load()) {
    if (auto tail = co_await observe_tail(p); !tail) p.fail(tail.error());
  }
  const auto t0 = pipeline_clock::now();
  co_await p.out->drain();
  p.counters.wait_ns += nanoseconds_since(t0);
  if (p.first_error) co_return *p.first_error;
  co_return result<void>{};
}

}  // namespace tz

// Loading to device memory: selection, the header pass of split tensors, the plan, the pinned ring,
// the device allocation, then readers on every worker and a drain of the copies in flight.
#include "device_direct.hpp"
#include "device_load_state.hpp"

#include "tz/host_memory.hpp"

#include <boost/asio/co_spawn.hpp>

#include <algorithm>
#include <limits>
#include <numeric>

namespace tz {

namespace {

// The ring's memory as pinned host memory; one allocation, made by the ring's constructor.
class pinned_allocator final : public buffer_allocator {
 public:
  std::byte* allocate(std::size_t size_bytes) override {
    auto b = cuda::alloc_pinned(size_bytes);
    if (!b) throw exception(b.error());
    buffer_ = std::move(*b);
    return buffer_.data();
  }
  void deallocate(std::byte*, std::size_t) noexcept override { buffer_ = cuda::pinned_buffer(); }

 private:
  cuda::pinned_buffer buffer_;
};

result<void> check_options(const device_load_options& o) {
  if (o.slot_count == 0 || o.slot_bytes == 0) {
    return make_error(errc::invalid_argument, "load to device: the staging ring needs at least one slot of at least "
                                              "one byte (slot_count " + std::to_string(o.slot_count) +
                                                  ", slot_bytes " + std::to_string(o.slot_bytes) + ")");
  }
  if (o.slot_bytes > (std::size_t{1} << 40) / o.slot_count) {
    return make_error(errc::invalid_argument, "load to device: a staging ring of " + std::to_string(o.slot_count) +
                                                  " x " + std::to_string(o.slot_bytes) + " bytes is unreasonably large");
  }
  return {};
}

// Reads, parses and keys the header of one split tensor (a small read before the load).
task<result<void>> read_split_header(device_load_state& st, std::uint32_t slot) {
  const format::tensor_entry& e = *st.selected[slot];
  const std::string& name = st.source->name();
  if (e.header_bytes() > format::max_tensor_header_bytes) {
    co_return make_error(errc::format, name + ": tensor " + e.name + " at offset " + std::to_string(e.header_offset) +
                                           ": header of " + std::to_string(e.header_bytes()) + " bytes exceeds " +
                                           std::to_string(format::max_tensor_header_bytes));
  }
  std::vector<std::byte> bytes(e.header_bytes());
  std::span<std::byte> one[1] = {bytes};
  TZ_CO_CHECK(co_await st.source->read(e.header_offset, one));
  TZ_CO_TRY(h, format::parse_tensor_header(bytes, st.index->header, e, name));
  auto& s = *st.splits[slot];
  s.header = std::move(h);
  if (st.encrypted) {
    TZ_CO_TRY(key, st.options->decryption->key_for(s.header, name));
    s.key = std::move(key);
  }
  if (st.options->verify) s.verifier.emplace(s.header);
  co_return result<void>{};
}

// Runs `body(st, i)` for i in [0, count) on `readers` coroutines spread over the workers; the
// first error fails the load. Completes when every coroutine has finished.
template <class Body>
task<void> run_on_workers(scheduler& sched, device_load_state& st, unsigned readers, Body body) {
  wait_group group;
  group.add(readers);
  for (unsigned k = 0; k < readers; ++k) {
    boost::asio::co_spawn(sched.worker_executor(k % sched.thread_count()), body(st),
                          [&st, &group](std::exception_ptr e) {
                            if (e) st.fail(make_error(errc::io, st.source->name() + ": a reader failed unexpectedly"));
                            group.done();
                          });
  }
  co_await group.wait();
}

// The header pass: headers of split tensors, read in parallel before planning their cuts.
task<result<std::vector<std::uint64_t>>> read_split_headers(scheduler& sched, device_load_state& st,
                                                            const device_plan_options& popts, unsigned readers) {
  std::vector<std::uint64_t> align(st.selected.size(), plain_split_align_bytes);
  st.splits.resize(st.selected.size());
  std::vector<std::uint32_t> todo;
  for (std::uint32_t slot = 0; slot < st.selected.size(); ++slot) {
    if (!needs_split(*st.selected[slot], popts)) continue;
    st.splits[slot] = std::make_unique<split_tensor>();
    if (st.with_headers) todo.push_back(slot);
  }
  std::atomic<std::size_t> next{0};
  auto body = [&todo, &next](device_load_state& s) -> task<void> {
    for (std::size_t i; !s.failed && (i = next.fetch_add(1)) < todo.size();) {
      auto ok = co_await read_split_header(s, todo[i]);
      if (!ok) s.fail(ok.error());
    }
  };
  co_await run_on_workers(sched, st, std::max<unsigned>(1, std::min<std::size_t>(readers, todo.size())), body);
  if (st.first_error) co_return *st.first_error;
  for (std::uint32_t slot : todo) {
    if (st.encrypted) align[slot] = format::cipher_chunk_bytes(st.splits[slot]->header);
  }
  co_return align;
}

// A reader: take a free slot first, then the next range, so that a range holding a slot never
// waits (for its hashing turn) on a range that still needs one.
task<void> range_reader(device_load_state& st) {
  while (!st.failed.load(std::memory_order_relaxed)) {
    auto t0 = device_clock::now();
    auto acquired = co_await st.ring->acquire();
    st.wait_ns += nanoseconds_since(t0);
    if (!acquired) {
      st.fail(acquired.error());
      break;
    }
    st.note_slots_out();
    const std::size_t i = st.next_range.fetch_add(1, std::memory_order_relaxed);
    if (i >= st.ring_ranges) break;
    auto ok = co_await process_range(st, st.plan.ranges[i], std::move(*acquired));
    if (!ok) {
      st.fail(ok.error());
      break;
    }
  }
}

}  // namespace

// Fills device_tensors' private fields (befriended by the header).
struct device_load_access {
  static device_tensors make(device_load_state& st, std::shared_ptr<cuda::device_buffer> buffer,
                             const device_load_timings& timings) {
    device_tensors out;
    for (const auto* e : st.selected) out.entries_.push_back(*e);
    out.offsets_ = st.plan.device_offset;
    out.buffer_ = std::move(buffer);
    out.timings_ = timings;
    out.data_bytes_ = st.plan.data_bytes;
    out.read_bytes_ = st.plan.read_bytes;
    out.ring_bytes_ = st.ring ? st.ring->slot_count() * st.ring->slot_bytes() : 0;
    out.pinned_bytes_max_ = st.ring ? st.slots_out_max.load() * st.ring->slot_bytes() : 0;
    return out;
  }
  // Bytes copied straight from the page cache, and the most of them pinned in place at once.
  static void add_direct(device_tensors& t, std::uint64_t direct_bytes, std::uint64_t pinned_bytes_max) {
    t.direct_bytes_ = direct_bytes;
    t.pinned_bytes_max_ += pinned_bytes_max;
  }
};

namespace {

// Everything before the readers start: checks, the header pass, and the plan.
task<result<void>> prepare(scheduler& sched, device_load_state& st, const loader& opened, std::vector<std::size_t> which,
                           unsigned& readers) {
  const auto& o = *st.options;
  TZ_CO_CHECK(check_options(o));
  TZ_CO_TRY(selected, select_in_file_order(*st.index, std::move(which)));
  st.selected = std::move(selected);
  st.with_headers = opened.kind() == file_kind::tensorizer;
  st.encrypted = st.with_headers && st.index->header.has_crypt_info();
  // safetensors has no encryption: a default header reads as "not encrypted" for the check.
  const format::file_header plain{};
  TZ_CO_CHECK(format::check_decryption_mode(st.with_headers ? st.index->header : plain, o.decryption.has_value(),
                                            st.source->name()));
  readers = o.readers != 0 ? o.readers
                           : std::max<unsigned>(1, std::min<std::size_t>(2 * sched.thread_count(), o.slot_count * 3 / 4));
  const device_plan_options popts{o.slot_bytes, 64 << 10, st.with_headers};
  TZ_CO_TRY(align, co_await read_split_headers(sched, st, popts, readers));
  TZ_CO_TRY(plan, make_device_plan(st.selected, align, popts));
  st.plan = std::move(plan);
  co_return result<void>{};
}

// Zero-fills the meta tensors on the device (they have no stored bytes).
result<std::vector<cuda::upload_ticket>> zero_meta(device_load_state& st) {
  std::vector<cuda::upload_ticket> tickets;
  for (std::size_t slot = 0; slot < st.selected.size(); ++slot) {
    const auto& e = *st.selected[slot];
    if (!e.is_meta()) continue;
    TZ_TRY(t, st.up->fill_zero(*st.dst, st.plan.device_offset[slot], e.deserialized_bytes));
    tickets.push_back(std::move(t));
  }
  return tickets;
}

// The one device allocation of a load (tensors at plan offsets), with meta tensors' zero fills
// queued; `zero_tickets` receives their tickets to wait on.
result<std::shared_ptr<cuda::device_buffer>> allocate_destination(cuda::uploader& up, device_load_state& st,
                                                                  std::vector<cuda::upload_ticket>& zero_tickets) {
  TZ_TRY(buffer, cuda::alloc_device(up.device(), st.plan.device_bytes));
  auto owned = std::make_shared<cuda::device_buffer>(std::move(buffer));
  st.dst = owned.get();
  TZ_TRY(zeros, zero_meta(st));
  zero_tickets = std::move(zeros);
  return owned;
}

result<void> wait_all(cuda::uploader& up, const std::vector<cuda::upload_ticket>& tickets) {
  result<void> first;
  for (const auto& t : tickets) {
    auto ok = up.wait(t);
    if (!ok && first) first = ok;
  }
  return first;
}

// Runs the readers over the plan, then drains the copies in flight: every lease is back in the
// ring when this completes, whatever failed.
task<void> run_readers(scheduler& sched, device_load_state& st, unsigned readers) {
  readers = std::max<unsigned>(1, std::min<std::size_t>(readers, st.ring_ranges));
  if (st.ring_ranges > 0) co_await run_on_workers(sched, st, readers, range_reader);
  auto t0 = device_clock::now();
  co_await st.uploads.wait();
  st.wait_ns += nanoseconds_since(t0);
}

double seconds(std::int64_t ns) { return static_cast<double>(ns) * 1e-9; }

// The selection and device layout without a ring: no tensor is split, so no header is read.
result<void> plan_direct(device_load_state& st, const loader& opened, std::vector<std::size_t> which) {
  TZ_TRY(selected, select_in_file_order(*st.index, std::move(which)));
  st.selected = std::move(selected);
  st.with_headers = opened.kind() == file_kind::tensorizer;
  const device_plan_options popts{std::numeric_limits<std::uint64_t>::max() / 2, 64 << 10, st.with_headers};
  const std::vector<std::uint64_t> align(st.selected.size(), plain_split_align_bytes);
  TZ_TRY(plan, make_device_plan(st.selected, align, popts));
  st.plan = std::move(plan);
  return {};
}

direct_upload_options direct_options(const device_load_options& o) {
  const std::uint64_t pinned = o.direct_pinned_bytes ? o.direct_pinned_bytes : o.slot_count * o.slot_bytes;
  return {o.direct_chunk_bytes, pinned, std::max(1u, o.direct_threads)};
}

// A load entirely from the page cache (direct_fraction 1): no ring at all. Nothing when the pages
// are mostly not cached (automatic mode): the ring path then runs.
task<result<std::optional<device_tensors>>> load_direct(cuda::uploader& up, const loader& opened, byte_source& source,
                                                        std::vector<std::size_t> which, const device_load_options& o,
                                                        const page_cache_file& file, device_clock::time_point t0) {
  device_load_state st;
  st.index = &opened.index();
  st.source = &source;
  st.up = &up;
  st.options = &o;
  TZ_CO_CHECK(plan_direct(st, opened, std::move(which)));
  auto pieces = range_pieces(st, 0, st.plan.ranges.size());
  auto cached = mostly_cached(file, pieces);
  if (!cached) co_return cached.error();
  if (!*cached && o.direct_from_page_cache != direct_mode::on) co_return std::optional<device_tensors>();
  std::vector<cuda::upload_ticket> zero_tickets;
  auto allocated = allocate_destination(up, st, zero_tickets);
  if (!allocated) co_return allocated.error();
  auto owned = std::move(*allocated);
  device_load_timings t;
  t.prepare_s = seconds(nanoseconds_since(t0));
  auto stats = co_await upload_from_page_cache(up, *owned, file, std::move(pieces), direct_options(o));
  auto zeroed = wait_all(up, zero_tickets);
  if (!stats) co_return stats.error();
  if (!zeroed) co_return zeroed.error();
  t.register_s = seconds(stats->register_ns);
  t.h2d_wait_s = seconds(stats->wait_ns);
  t.total_s = seconds(nanoseconds_since(t0));
  auto out = device_load_access::make(st, std::move(owned), t);
  device_load_access::add_direct(out, st.plan.data_bytes, stats->pinned_bytes_max);
  co_return std::optional<device_tensors>(std::move(out));
}

std::uint64_t piece_bytes(std::span<const direct_piece> pieces) {
  std::uint64_t n = 0;
  for (const auto& p : pieces) n += p.length_bytes;
  return n;
}

// The direct share of a ring load: the last ranges of the plan, about direct_fraction of the bytes,
// when the file is warm. Sets st.ring_ranges; returns the pieces (empty: all through the ring).
result<std::vector<direct_piece>> split_direct_share(device_load_state& st, const page_cache_file* file) {
  st.ring_ranges = st.plan.ranges.size();
  if (file == nullptr || st.options->direct_fraction <= 0) return std::vector<direct_piece>();
  const std::size_t first = direct_split(st.plan, st.options->direct_fraction);
  auto pieces = range_pieces(st, first, st.plan.ranges.size());
  TZ_TRY(cached, mostly_cached(*file, pieces));
  if (!cached && st.options->direct_from_page_cache != direct_mode::on) return std::vector<direct_piece>();
  st.ring_ranges = first;
  return pieces;
}

}  // namespace

result<std::unique_ptr<lease_ring>> make_pinned_ring(std::size_t slot_count, std::size_t slot_bytes) {
  device_load_options o;
  o.slot_count = slot_count;
  o.slot_bytes = slot_bytes;
  TZ_CHECK(check_options(o));
  try {
    return std::make_unique<lease_ring>(slot_count, slot_bytes + page_bytes, std::make_shared<pinned_allocator>());
  } catch (const exception& e) {
    return make_error(e.code(), std::string("staging ring: ") + e.what());
  } catch (const std::bad_alloc&) {
    return make_error(errc::io, "staging ring: out of host memory");
  }
}

// GCC 12 reports a false -Wmismatched-new-delete for this coroutine's frame (asio's awaitable
// frame defines both its operator new and delete); the frame is allocated and freed by asio.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
task<result<device_tensors>> async_load_to_device(scheduler& sched, cuda::uploader& up, const loader& opened,
                                                  std::shared_ptr<byte_source> source, std::vector<std::size_t> which,
                                                  device_load_options options) {
  const auto t0 = device_clock::now();
  if (!source || &opened.source() != source.get()) {
    co_return make_error(errc::invalid_argument, "load to device: the source is not the one the loader was opened from");
  }
  auto file = co_await choose_direct_file(up, opened, *source, options);
  if (!file) co_return file.error();
  if (*file && options.direct_fraction >= 1) {
    auto direct = co_await load_direct(up, opened, *source, which, options, **file, t0);
    if (!direct) co_return direct.error();
    if (*direct) co_return std::move(**direct);
    file->reset();  // mostly not cached: the ring path alone
  }
  std::unique_ptr<lease_ring> own_ring;
  if (options.ring == nullptr) {
    TZ_CO_TRY(made, make_pinned_ring(options.slot_count, options.slot_bytes));
    own_ring = std::move(made);
    options.ring = own_ring.get();
  }
  // A caller's ring decides the slot size (less the alignment page) and count.
  options.slot_count = options.ring->slot_count();
  options.slot_bytes = options.ring->slot_bytes() > page_bytes ? options.ring->slot_bytes() - page_bytes : 0;
  device_load_state st;
  st.ring = options.ring;
  st.index = &opened.index();
  st.source = source.get();
  st.up = &up;
  st.options = &options;
  unsigned readers = 0;
  TZ_CO_CHECK(co_await prepare(sched, st, opened, std::move(which), readers));
  std::vector<cuda::upload_ticket> zero_tickets;
  TZ_CO_TRY(owned, allocate_destination(up, st, zero_tickets));
  auto share = split_direct_share(st, file->has_value() ? &**file : nullptr);
  if (!share) co_return share.error();
  const std::uint64_t direct_bytes = piece_bytes(*share);
  // Hashes of split tensors are fed in part order: let several tensors advance at once.
  if (options.verify) interleave_split_tensors(st.plan, st.ring_ranges, readers);
  device_load_timings t;
  t.prepare_s = seconds(nanoseconds_since(t0));
  // The direct share runs on its own threads beside the ring's readers.
  wait_group direct_done;
  result<direct_upload_stats> stats = direct_upload_stats{};
  if (!share->empty()) {
    direct_done.add();
    boost::asio::co_spawn(sched.next_executor(),
                          upload_from_page_cache(up, *owned, **file, std::move(*share), direct_options(options)),
                          [&](std::exception_ptr e, result<direct_upload_stats> r) {
                            stats = e ? make_error(errc::io, source->name() + ": the direct upload failed unexpectedly")
                                      : std::move(r);
                            direct_done.done();
                          });
  }
  co_await run_readers(sched, st, readers);
  co_await direct_done.wait();
  auto zeroed = wait_all(up, zero_tickets);
  if (st.first_error) co_return *st.first_error;
  if (!stats) co_return stats.error();
  if (!zeroed) co_return zeroed.error();
  t.read_s = seconds(st.read_ns);
  t.verify_s = seconds(st.verify_ns);
  t.decrypt_s = seconds(st.decrypt_ns);
  t.upload_s = seconds(st.upload_ns);
  t.register_s = seconds(stats->register_ns);
  t.h2d_wait_s = seconds(st.wait_ns + stats->wait_ns);
  t.total_s = seconds(nanoseconds_since(t0));
  auto out = device_load_access::make(st, std::move(owned), t);
  if (direct_bytes > 0) device_load_access::add_direct(out, direct_bytes, stats->pinned_bytes_max);
  co_return out;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace tz

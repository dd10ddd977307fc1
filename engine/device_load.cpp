// Device loads: the pipeline with a device sink. Reads land in leases of a pinned ring, are checked
// and decrypted there, and are copied to one device allocation; each copy's completion returns
// its lease to the ring.
#include "device_crc.hpp"
#include "device_open.hpp"
#include "pipeline.hpp"
#include "device_sinks.hpp"
#include "ready_order.hpp"

#include "tz/engine/device_load.hpp"
#include "tz/engine/host_memory.hpp"
#include "tz/engine/load_trace.hpp"
#include "tz/cuda/crc32.hpp"
#include "tz/cuda/secretbox.hpp"
#include "tz/engine/wait_group.hpp"

#include <algorithm>
#include <future>
#include <numeric>

namespace tz {

namespace {

// The device layout: each selected tensor at a device_align_bytes multiple of one allocation.
struct device_layout {
  std::vector<std::uint64_t> offsets;
  std::uint64_t bytes = 0;
  const format::tensor_entry* too_large = nullptr;  // the first tensor past 2^64 bytes, if any

  explicit device_layout(std::span<const format::tensor_entry* const> selected) {
    for (const auto* e : selected) {
      offsets.push_back(bytes);
      // Sizes come from shapes alone (meta tensors): a sum that wraps would allocate too little.
      if (e->deserialized_bytes > UINT64_MAX - device_align_bytes - bytes) {
        too_large = e;
        return;
      }
      bytes = (bytes + e->deserialized_bytes + device_align_bytes - 1) / device_align_bytes * device_align_bytes;
    }
  }
};

// Enqueues the zero-fill of the meta tensors (they have no stored bytes) on the streams; the load
// waits for the tickets after its copies, so the fills overlap the first reads.
result<std::vector<cuda::upload_ticket>> zero_meta(cuda::uploader& up, std::span<const format::tensor_entry* const> selected,
                                                   cuda::device_buffer& dst, const device_layout& layout) {
  std::vector<cuda::upload_ticket> tickets;
  for (std::size_t t = 0; t < selected.size(); ++t) {
    const auto& e = *selected[t];
    if (!e.is_meta()) continue;
    TZ_TRY(ticket, up.fill_zero(dst, layout.offsets[t], e.deserialized_bytes));
    tickets.push_back(std::move(ticket));
  }
  return tickets;
}

// The load's device memory, allocated on a thread of its own while the first reads land in the
// ring: in a fresh process the first cudaMalloc of gigabytes takes tens of milliseconds. The meta
// tensors' zero-fills are enqueued right after it. The first copies wait in get().
class device_destination {
 public:
  // The load's device memory and what works on it: the meta tensors' fills, the device-side
  // decryption and CRC32 when the load does them.
  struct allocation {
    std::shared_ptr<cuda::device_buffer> buffer;
    std::vector<std::shared_ptr<cuda::upload_ticket>> fills;  // shared: a shared_future copies
    double alloc_s = 0;
    std::shared_ptr<device_opener> opener;  // decryption on the device, when the load does it
    std::shared_ptr<device_crc> crc;        // CRC32 on the device, when the load does it
  };

  // `landed` (tensors as they land, p.ready): set to the buffer before any tensor is handed over.
  device_destination(device_context& ctx, const pipeline& p, const device_layout& layout, load_trace* trace,
                     std::shared_ptr<cuda::device_buffer>* landed = nullptr)
      : allocation_(std::async(std::launch::async, [&ctx, &p, &layout, trace, landed] {
          return make(ctx, p, layout, trace, landed);
        }).share()) {}

  // Blocks until the allocation (and the fills' enqueueing) is done; its outcome. Thread-safe.
  const result<allocation>& get() const { return allocation_.get(); }

 private:
  static result<allocation> make(device_context& ctx, const pipeline& p, const device_layout& layout, load_trace* trace,
                                 std::shared_ptr<cuda::device_buffer>* landed) {
    cuda::uploader& up = ctx.uploader();
    const auto t0 = pipeline_clock::now();
    // A verified load's CRC32 results follow the tensors in the same allocation (layout.bytes is
    // a multiple of device_align_bytes, so they are aligned).
    const std::uint64_t crc_bytes = p.crc_on_device ? device_crc::bytes_for(p.plan) : 0;
    if (crc_bytes > UINT64_MAX - layout.bytes)  // shapes alone (meta tensors) can make layout.bytes huge
      return make_error(errc::unsupported, p.source->name() + ": the load would need more than 2^64 device bytes");
    TZ_TRY(buffer, cuda::alloc_device(up.device(), layout.bytes + crc_bytes));
    allocation out{std::make_shared<cuda::device_buffer>(std::move(buffer)), {}, seconds_of(nanoseconds_since(t0))};
    if (trace) trace->span("allocate device memory", t0, pipeline_clock::now(), -1, 0, layout.bytes + crc_bytes);
    if (p.decrypt_on_device) {
      TZ_TRY(opener, device_opener::create(ctx, p.selected));
      out.opener = std::move(opener);
    }
    if (p.crc_on_device) out.crc = std::make_shared<device_crc>(out.buffer, layout.bytes, p.plan);
    TZ_TRY(tickets, zero_meta(up, p.selected, *out.buffer, layout));
    if (p.ready) {  // tensors as they land: each waits for its place, a meta tensor for its zeros
      TZ_CHECK(wait_all(up, tickets));
      *landed = out.buffer;
      for (std::uint32_t t = 0; t < p.selected.size(); ++t) p.ready->unit_done(t);
      return out;
    }
    for (auto& t : tickets) out.fills.push_back(std::make_shared<cuda::upload_ticket>(std::move(t)));
    return out;
  }

  std::shared_future<result<allocation>> allocation_;
};

// The device sink: room is a ring slot; delivery is one batched copy of the range's data pieces
// on one stream, whose completion returns the slot: never a synchronize per tensor.
class device_sink final : public sink {
 public:
  device_sink(pipeline& p, cuda::uploader& up, lease_ring& ring, device_destination& dst, const device_layout& layout)
      : p_(p), up_(up), ring_(ring), dst_(dst), layout_(layout) {}

  task<result<lease>> reserve() override { return reserve_slot(ring_, p_, slots_out_max_); }
  void place(const load_range& r, landing& where) override { place_in_slot(r, where); }

  result<void> deliver(const load_range& r, landing& where, std::int64_t index) override {
    std::vector<cuda::upload_piece> pieces;
    for (std::size_t k = 0; k < r.pieces.size(); ++k) {
      const plan_piece& piece = r.pieces[k];
      if (piece.what == plan_piece::kind::data)
        pieces.push_back({where.pieces[k], layout_.offsets[piece.tensor] + piece.data_begin_bytes});
    }
    if (pieces.empty()) {  // only headers (data-less tensors): the lease returns here
      if (p_.ready) p_.ready->range_done(r);
      return {};
    }
    const auto& alloc = dst_.get();  // the first copies wait here for the allocation
    if (!alloc) return alloc.error();
    // upload_callback is a std::function, which needs a copyable callable: share the lease.
    auto held = std::make_shared<lease>(std::move(where.held));
    uploads_.add();
    const auto t0 = pipeline_clock::now();
    auto on_done = [this, held, index, t0, &r](result<void> done) {
      if (!done) p_.fail(done.error());
      held->reset();
      if (done && p_.ready) p_.ready->range_done(r);  // the plan outlives the copies (drain)
      const std::uint64_t bytes = r.length_bytes;
      if (auto* trace = p_.options->trace.get()) note_copy(*trace, index, t0, bytes);
      uploads_.done();
    };
    auto ticket = [&]() -> result<cuda::upload_ticket> {
      // The kernels that open the chunks (decryption) or take their CRC32s (verification) run
      // behind the copies, on their stream; a load does one or the other (decrypt_on_device
      // excludes verify).
      auto* base = static_cast<std::byte*>(alloc->buffer->data());
      if (!where.sealed.empty()) {
        TZ_TRY(opener, alloc->opener->opener_for(std::move(where.sealed), base, layout_.offsets));
        return up_.upload(pieces, *alloc->buffer, std::move(on_done), opener);
      }
      if (alloc->crc) {
        TZ_TRY(crc, alloc->crc->crc_for(r, base, layout_.offsets));
        return up_.upload(pieces, *alloc->buffer, std::move(on_done), crc);
      }
      return up_.upload(pieces, *alloc->buffer, std::move(on_done));
    }();
    p_.counters.upload_ns += nanoseconds_since(t0);
    if (!ticket) {
      uploads_.done();  // the callback will never run
      return ticket.error();
    }
    return {};  // the ticket's event may go now: the callback reports the outcome
  }

  task<void> drain() override { co_await uploads_.wait(); }

  std::size_t slots_out_max() const noexcept { return slots_out_max_.load(); }

 private:
  // A copy from its enqueueing to its completion, and the first one to complete.
  void note_copy(load_trace& trace, std::int64_t index, pipeline_clock::time_point begin, std::uint64_t bytes) {
    const auto now = pipeline_clock::now();
    trace.async_span("copy to the device", "copies", static_cast<std::uint64_t>(index), begin, now, bytes);
    if (!first_copy_done_.exchange(true)) trace.instant("first copy complete", now);
  }

  pipeline& p_;
  cuda::uploader& up_;
  lease_ring& ring_;
  device_destination& dst_;
  const device_layout& layout_;
  wait_group uploads_;  // copies in flight
  std::atomic<std::size_t> slots_out_max_{0};
  std::atomic<bool> first_copy_done_{false};
};

}  // namespace

// Fills device_tensors' private fields (befriended by the header).
struct device_load_access {
  static device_tensors make(const pipeline& p, const device_layout& layout, std::shared_ptr<cuda::device_buffer> buffer,
                             const load_timings& timings, const lease_ring& ring, std::size_t slots_out_max,
                             unsigned readers) {
    device_tensors out;
    for (const auto* e : p.selected) {
      out.entries_.push_back(*e);
      out.indices_.push_back(static_cast<std::size_t>(e - p.index->tensors.data()));
    }
    out.offsets_ = layout.offsets;
    out.buffer_ = std::move(buffer);
    out.timings_ = timings;
    out.data_bytes_ = p.plan.data_bytes;
    out.read_bytes_ = p.plan.read_bytes;
    out.ring_bytes_ = ring.slot_count() * ring.slot_bytes();
    out.pinned_bytes_max_ = slots_out_max * ring.slot_bytes();
    out.readers_ = readers;
    return out;
  }
};

namespace {

// Selection, encryption mode, readers, header pass and plan; ranges at most one slot long.
task<result<unsigned>> prepare_device(scheduler& sched, pipeline& p, const loader& opened, std::vector<std::size_t> which,
                                      const device_load_options& o, const lease_ring& ring) {
  p.with_headers = opened.kind() == file_kind::tensorizer;
  p.encrypted = p.with_headers && p.index->header.has_crypt_info();
  // safetensors has no encryption: a default header reads as "not encrypted" for the check.
  const format::file_header plain{};
  TZ_CO_CHECK(format::check_decryption_mode(p.with_headers ? p.index->header : plain, o.decryption.has_value(),
                                            p.source->name()));
  TZ_CO_TRY(selected, select_in_file_order(*p.index, std::move(which)));
  p.selected = std::move(selected);
  // A tensor handed over as it lands must be checked first: the device kernels report at the end.
  const bool streamed = static_cast<bool>(o.on_tensor_ready);
  p.decrypt_on_device = p.encrypted && !o.verify && o.decrypt_on_device && !streamed && cuda::secretbox_kernels_available();
  p.crc_on_device = p.with_headers && o.verify && o.crc_on_device && !streamed && cuda::crc32_kernels_available();
  if (p.crc_on_device) p.headers.resize(p.selected.size());  // the header pass and the checks fill them
  // Readers leave a quarter of the slots free for uploads while they wait on I/O.
  const unsigned readers =
      o.readers != 0 ? o.readers
                     : std::max<unsigned>(1, std::min<std::size_t>(default_readers(sched, *p.source), ring.slot_count() * 3 / 4));
  const std::uint64_t slot = ring.slot_bytes() > page_bytes ? ring.slot_bytes() - page_bytes : 0;
  plan_options popts;
  popts.range_bytes = slot;
  popts.range_limit_bytes = slot;
  TZ_CO_CHECK(co_await prepare_plan(sched, p, popts, readers));
  co_return readers;
}

}  // namespace

// GCC 12 reports a false -Wmismatched-new-delete for this coroutine's frame (asio's awaitable
// frame defines both its operator new and delete); the frame is allocated and freed by asio.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
result<void> device_context::prepare_shared(int device, bool verify) {
  TZ_TRY(ctx, shared(device));
  device_load_options shape;
  shape.verify = verify;
  return ctx->reserve_ring(shape.slots(), shape.slot_bytes);
}

task<result<device_tensors>> async_load_to_device(scheduler& sched, device_context& ctx, const loader& opened,
                                                  std::vector<std::size_t> which, device_load_options options) {
  const auto t0 = pipeline_clock::now();
  load_timings t;
  TZ_CO_TRY(ring, ctx.take_ring(options.slots(opened.source()), options.slot_bytes));
  t.ring_s = seconds_of(nanoseconds_since(t0));
  if (options.trace) options.trace->span("take a pinned ring", t0, pipeline_clock::now());
  pipeline p;
  p.index = &opened.index();
  auto source = opened.shared_source();  // held for the whole load
  p.source = source.get();
  p.options = &options;
  TZ_CO_TRY(readers, co_await prepare_device(sched, p, opened, std::move(which), options, ring.get()));
  const device_layout layout(p.selected);
  if (layout.too_large)
    co_return make_error(errc::unsupported, source->name() + ": tensor '" + format::display_name(layout.too_large->path) +
                                                "' of " + std::to_string(layout.too_large->deserialized_bytes) +
                                                " bytes: the load would need more than 2^64 bytes");
  // Tensors as they land: every tensor also waits for the allocation (and a meta tensor its zeros).
  std::shared_ptr<cuda::device_buffer> landed;
  std::unique_ptr<ready_order> ready;
  if (options.on_tensor_ready) {
    std::vector<std::uint32_t> all(p.selected.size());
    std::iota(all.begin(), all.end(), 0u);
    ready = std::make_unique<ready_order>(p, [&landed, &layout](std::uint32_t t) {
      return tensor_ready{.device_address = static_cast<std::byte*>(landed->data()) + layout.offsets[t], .owner = landed};
    }, t0, all);
    p.ready = ready.get();
  }
  cuda::uploader& up = ctx.uploader();
  device_destination dst(ctx, p, layout, options.trace.get(), &landed);
  device_sink to(p, up, ring.get(), dst, layout);
  p.out = &to;
  t.prepare_s = seconds_of(nanoseconds_since(t0));
  const auto t1 = pipeline_clock::now();
  if (options.trace) options.trace->span("prepare (select, plan)", t0, t1);
  auto ran = co_await run_pipeline(sched, p, readers);
  const auto& alloc = dst.get();  // also after a failure: no fill may outlive the buffer
  auto filled = alloc ? wait_all(up, alloc->fills) : result<void>();
  TZ_CO_CHECK(ran);
  TZ_CO_CHECK(alloc);
  TZ_CO_CHECK(filled);
  if (alloc->opener) TZ_CO_CHECK(alloc->opener->check(p.source->name()));
  if (alloc->crc) TZ_CO_CHECK(alloc->crc->check(p));
  t.alloc_s = alloc->alloc_s;
  t.transfer_s = seconds_of(nanoseconds_since(t1));
  t.total_s = seconds_of(nanoseconds_since(t0));
  t.open_s = opened.open_seconds();
  t.read_s = seconds_of(p.counters.read_ns);
  t.verify_s = seconds_of(p.counters.verify_ns);
  t.decrypt_s = seconds_of(p.counters.decrypt_ns);
  t.upload_s = seconds_of(p.counters.upload_ns);
  t.wait_s = seconds_of(p.counters.wait_ns);
  co_return device_load_access::make(p, layout, alloc->buffer, t, ring.get(), to.slots_out_max(), readers);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace tz

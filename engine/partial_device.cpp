// Partial loads onto a device (partial_load.hpp: load_extents_to_device): the extents' plan run by
// the one pipeline with a sink whose room is a slot of the context's pinned ring. A rank's share of
// a partitioned checkpoint, or its tensor-parallel slices, lands in its place in device memory
// holding no more pinned memory than the ring, whatever the share's size: the host buffer of the
// whole share, and the copy out of it, are gone.
#include "extent_sink.hpp"
#include "device_sinks.hpp"

#include "tz/engine/host_memory.hpp"
#include "tz/engine/wait_group.hpp"

#include <algorithm>

namespace tz {

namespace {

// Room is a ring slot; the range lands in it whole (at its file offset modulo a page, so O_DIRECT
// applies), is checked and decrypted there, and its destination pieces are copied to the device in
// one batch on one stream, whose completion returns the slot.
class device_extent_sink final : public extent_sink {
 public:
  device_extent_sink(pipeline& p, cuda::uploader& up, lease_ring& ring, cuda::device_buffer& dst,
                     std::vector<cuda::upload_ticket>& fills, std::atomic<std::size_t>& slots_out_max)
      : extent_sink(p), pipe_(p), up_(up), ring_(ring), dst_(dst), fills_(fills), slots_out_max_(slots_out_max) {}

  task<result<lease>> reserve() override { return reserve_slot(ring_, pipe_, slots_out_max_); }
  void place(const load_range& r, landing& where) override { place_in_slot(r, where); }

  result<void> deliver(const load_range& r, landing& where, std::int64_t) override {
    std::vector<cuda::upload_piece> pieces;
    const range_target* t = target_of(r);
    if (t != nullptr && t->staged) {
      for (const auto& [at, dst] : t->copy_out) pieces.push_back({where.whole.subspan(at, dst.size()), offset_of(dst.data())});
    } else {
      for (std::size_t k = 0; k < r.pieces.size(); ++k)
        if (std::byte* d = destination(r, k, t)) pieces.push_back({where.pieces[k], offset_of(d)});
    }
    if (pieces.empty()) return {};  // headers only: the slot returns here
    auto held = std::make_shared<lease>(std::move(where.held));  // upload_callback must be copyable
    uploads_.add();
    const auto t0 = pipeline_clock::now();
    auto ticket = up_.upload(pieces, dst_, [this, held](result<void> done) {
      if (!done) pipe_.fail(done.error());
      held->reset();
      uploads_.done();
    });
    pipe_.counters.upload_ns += nanoseconds_since(t0);
    if (!ticket) {
      uploads_.done();  // the callback will never run
      return ticket.error();
    }
    return {};
  }

  task<void> drain() override { co_await uploads_.wait(); }

  result<void> zero(std::span<std::byte> dst) override {
    if (dst.empty()) return {};
    TZ_TRY(ticket, up_.fill_zero(dst_, offset_of(dst.data()), dst.size()));
    fills_.push_back(std::move(ticket));
    return {};
  }

 private:
  std::size_t offset_of(const std::byte* device_address) const noexcept {
    return static_cast<std::size_t>(device_address - static_cast<const std::byte*>(dst_.data()));
  }
  pipeline& pipe_;
  cuda::uploader& up_;
  lease_ring& ring_;
  cuda::device_buffer& dst_;
  std::vector<cuda::upload_ticket>& fills_;
  std::atomic<std::size_t>& slots_out_max_;
  wait_group uploads_;  // copies in flight
};

// The extents as places in the region (addresses inside it, never dereferenced on the host), or
// errc::invalid_argument naming the first that does not fit.
result<std::vector<tensor_extent>> place_in_region(const loader& l, const std::vector<device_extent>& extents,
                                                   const device_region& region) {
  std::vector<tensor_extent> out;
  out.reserve(extents.size());
  auto* base = static_cast<std::byte*>(region.data);
  for (const auto& x : extents) {
    if (x.offset_bytes > region.size_bytes || x.part.length_bytes > region.size_bytes - x.offset_bytes)
      return make_error(errc::invalid_argument,
                        l.source().name() + ": tensor index " + std::to_string(x.part.index) + ": " +
                            std::to_string(x.part.length_bytes) + " bytes at offset " + std::to_string(x.offset_bytes) +
                            " of a device region of " + std::to_string(region.size_bytes) + " bytes");
    out.push_back({x.part, std::span<std::byte>(base + x.offset_bytes, x.part.length_bytes)});
  }
  return out;
}


}  // namespace

// GCC 12 reports a false -Wmismatched-new-delete for this coroutine's frame (see device_load.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
task<result<device_extent_result>> async_load_extents_to_device(scheduler& sched, device_context& ctx, const loader& l,
                                                                std::vector<device_extent> extents, device_region region,
                                                                device_extent_options options) {
  cuda::uploader& up = ctx.uploader();
  if (region.device != up.device())
    co_return make_error(errc::invalid_argument, l.source().name() + ": a device region on cuda:" +
                                                     std::to_string(region.device) + " for a load to cuda:" +
                                                     std::to_string(up.device()));
  TZ_CO_TRY(places, place_in_region(l, extents, region));
  TZ_CO_TRY(dst, cuda::borrow_device(region.device, region.data, region.size_bytes));
  TZ_CO_TRY(ring, ctx.take_ring(options.slots(l.source()), options.slot_bytes));
  lease_ring& slots = ring.get();
  extent_options o;
  static_cast<load_common_options&>(o) = options;
  o.gap_merge_bytes = options.gap_merge_bytes;
  // Readers leave a quarter of the slots free for copies while they wait on I/O.
  const unsigned readers = options.readers != 0 ? options.readers
                                                : std::max<unsigned>(1, std::min<std::size_t>(default_readers(sched, l.source()),
                                                                                              slots.slot_count() * 3 / 4));
  o.readers = readers;
  const extent_plan_limits limits{slots.slot_bytes() > page_bytes ? slots.slot_bytes() - page_bytes : 0};
  std::vector<cuda::upload_ticket> fills;
  std::atomic<std::size_t> slots_out_max{0};
  const extent_sink_maker make = [&](pipeline& p) -> std::unique_ptr<extent_sink> {
    return std::make_unique<device_extent_sink>(p, up, slots, dst, fills, slots_out_max);
  };
  auto ran = co_await run_extents(sched, l, std::move(places), std::move(o), make, limits);
  auto filled = wait_all(up, fills);  // also after a failure: no fill may outlive the load
  TZ_CO_CHECK(ran);
  TZ_CO_CHECK(filled);
  device_extent_result out;
  static_cast<extent_load_result&>(out) = std::move(*ran);
  out.ring_bytes = slots.slot_count() * slots.slot_bytes();
  out.pinned_bytes_max = slots_out_max.load() * slots.slot_bytes();
  out.readers = readers;
  co_return out;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

result<device_extent_result> load_extents_to_device(scheduler& sched, device_context& ctx, const loader& l,
                                                    std::vector<device_extent> extents, device_region region,
                                                    device_extent_options options) {
  return run(sched, async_load_extents_to_device(sched, ctx, l, std::move(extents), region, std::move(options)));
}

}  // namespace tz

// One range of a load to device memory, on the lease that holds it: read, parse the headers it
// contains, decrypt and verify on the host, then one batched copy whose completion returns the lease.
#include "device_load_state.hpp"

#include "tz/host_memory.hpp"

#include <algorithm>

namespace tz {

void device_load_state::fail(error e) noexcept {
  {
    std::lock_guard lock(error_mutex);
    if (!first_error) first_error = std::move(e);
  }
  failed = true;
  for (auto& s : splits) {
    if (s) s->turns.abort();
  }
}

void device_load_state::note_slots_out() noexcept {
  const std::size_t out = ring->slot_count() - ring->available();
  std::size_t seen = slots_out_max.load(std::memory_order_relaxed);
  while (out > seen && !slots_out_max.compare_exchange_weak(seen, out, std::memory_order_relaxed)) {
  }
}

namespace {

// Decrypts (encrypted files) and verifies (when asked) one whole tensor whose header and data are
// both in this range. `data` is empty for data-less tensors.
result<void> check_whole(device_load_state& st, const format::tensor_header& h, std::span<std::byte> data) {
  const std::string& name = st.source->name();
  if (st.encrypted && !data.empty()) {
    auto t0 = device_clock::now();
    auto key = st.options->decryption->key_for(h, name);
    if (!key) return key.error();
    auto ok = format::decrypt_chunks(h, data, {0, format::cipher_chunk_count(h)}, **key, name);
    st.decrypt_ns += nanoseconds_since(t0);
    if (!ok) return ok.error();
  }
  if (st.options->verify) {
    auto t0 = device_clock::now();
    auto ok = format::verify_tensor(h, data, name);
    st.verify_ns += nanoseconds_since(t0);
    if (!ok) return ok.error();
  }
  return {};
}

// Whole tensors: each header piece is followed, in the same range, by its data piece (if any).
result<void> check_whole_tensors(device_load_state& st, const device_range& r, std::span<std::byte> bytes) {
  if (!st.with_headers) return {};  // safetensors: no per-tensor header, nothing to check
  for (std::size_t k = 0; k < r.pieces.size(); ++k) {
    const device_piece& p = r.pieces[k];
    if (!p.header) continue;
    const format::tensor_entry& e = *st.selected[p.slot];
    auto h = format::parse_tensor_header(bytes.subspan(p.offset_bytes - r.offset_bytes, p.length_bytes),
                                         st.index->header, e, st.source->name());
    if (!h) return h.error();
    std::span<std::byte> data;
    if (k + 1 < r.pieces.size() && !r.pieces[k + 1].header && r.pieces[k + 1].slot == p.slot) {
      const device_piece& d = r.pieces[k + 1];
      data = bytes.subspan(d.offset_bytes - r.offset_bytes, d.length_bytes);
    }
    TZ_CHECK(check_whole(st, *h, data));
  }
  return {};
}

// A part of a split tensor: decrypt its whole chunks (any order), then hash it in its turn.
task<result<void>> check_split_part(device_load_state& st, const device_range& r, std::span<std::byte> bytes) {
  split_tensor& s = *st.splits[r.split_slot];
  const device_piece& p = r.pieces.front();
  const std::string& name = st.source->name();
  if (st.encrypted) {
    auto t0 = device_clock::now();
    const std::uint64_t chunk = format::cipher_chunk_bytes(s.header);
    const crypto::chunk_range chunks{p.data_begin_bytes / chunk, (p.data_begin_bytes + p.length_bytes + chunk - 1) / chunk};
    auto ok = format::decrypt_chunks(s.header, bytes, chunks, *s.key, name);
    st.decrypt_ns += nanoseconds_since(t0);
    if (!ok) co_return ok.error();
  }
  if (!s.verifier) co_return result<void>{};
  if (!co_await s.turns.wait(r.part)) {
    co_return make_error(errc::cancelled, name + ": tensor " + s.header.name + ": verification abandoned (the load failed)");
  }
  auto t0 = device_clock::now();
  s.verifier->update(bytes);
  result<void> ok;
  if (r.part + 1 == st.plan.part_count[r.split_slot]) ok = s.verifier->finish(name);
  st.verify_ns += nanoseconds_since(t0);
  s.turns.pass();
  co_return ok;
}

// Enqueues the range's data pieces as one batched copy on one stream. The lease rides along in
// the completion callback, which returns it to the ring: never a synchronize per tensor.
result<void> upload_range(device_load_state& st, const device_range& r, std::span<std::byte> bytes, lease l) {
  std::vector<cuda::upload_piece> pieces;
  for (const device_piece& p : r.pieces) {
    if (p.header) continue;
    pieces.push_back({bytes.subspan(p.offset_bytes - r.offset_bytes, p.length_bytes),
                      st.plan.device_offset[p.slot] + p.data_begin_bytes});
  }
  if (pieces.empty()) return {};  // only headers (data-less tensors): the lease returns here
  // upload_callback is a std::function, which needs a copyable callable: share the lease.
  auto held = std::make_shared<lease>(std::move(l));
  st.uploads.add();
  const auto t0 = device_clock::now();
  auto ticket = st.up->upload(pieces, *st.dst, [&st, held](result<void> done) {
    if (!done) st.fail(done.error());
    held->reset();
    st.uploads.done();
  });
  st.upload_ns += nanoseconds_since(t0);
  if (!ticket) {
    st.uploads.done();  // the callback will never run
    return ticket.error();
  }
  return {};  // the ticket's event may be destroyed now: the callback reports the outcome
}

}  // namespace

task<result<void>> process_range(device_load_state& st, const device_range& r, lease l) {
  // Land the read at its file offset modulo a page, so O_DIRECT can read straight into the slot.
  std::span<std::byte> bytes = l.bytes().subspan(r.offset_bytes % page_bytes, r.length_bytes);
  auto t0 = device_clock::now();
  std::span<std::byte> one[1] = {bytes};
  auto rd = co_await st.source->read(r.offset_bytes, one);
  st.read_ns += nanoseconds_since(t0);
  if (!rd) co_return rd;
  if (r.split_slot != no_split) {
    TZ_CO_CHECK(co_await check_split_part(st, r, bytes));
  } else if (auto ok = check_whole_tensors(st, r, bytes); !ok) {
    co_return ok;
  }
  co_return upload_range(st, r, bytes, std::move(l));
}

}  // namespace tz

// The load pipeline: readers on every worker pull ranges, read them (straight into the destination,
// or into a lease for a stage), count tensors down, and verify each completed tensor where it ends.
#include "pipeline_request.hpp"

#include "tz/lease_ring.hpp"
#include "tz/wait_group.hpp"

#include <boost/asio/co_spawn.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>

namespace tz {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Shared by the readers of one load; lives in run_pipeline's frame until every reader is done.
struct pipeline_state {
  loader::pipeline_request* req = nullptr;
  const format::file_index* index = nullptr;
  byte_source* source = nullptr;
  lease_ring* leases = nullptr;  // only with a stage
  std::atomic<std::size_t> next_range{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::optional<error> first_error;
  std::unique_ptr<std::atomic<std::uint64_t>[]> remaining;  // per tensor: bytes still to read
  std::atomic<std::uint64_t> bytes_done{0};
  std::atomic<std::size_t> tensors_done{0};
  std::atomic<std::int64_t> verify_ns{0};
  std::atomic<std::int64_t> decrypt_ns{0};
  std::mutex progress_mutex;

  void fail(error e) {
    std::lock_guard lock(error_mutex);
    if (!first_error) first_error = std::move(e);
    failed = true;
  }
};

// Where the bytes of a piece go (scatter layout) or live after the read (both layouts).
std::span<std::byte> piece_destination(pipeline_state& st, const load_range& r, const plan_piece& p) {
  auto& req = *st.req;
  if (req.mirror_base != nullptr) {
    return {req.mirror_base + r.mirror_offset + (p.offset_bytes - r.offset_bytes), p.length_bytes};
  }
  if (p.what == plan_piece::kind::data) {
    const auto& e = *req.selected[p.slot];
    return req.data_dst[p.slot].subspan(p.offset_bytes - e.data_offset, p.length_bytes);
  }
  return {req.side.data() + p.side_offset, p.length_bytes};
}

std::span<const std::byte> header_bytes(pipeline_state& st, std::size_t slot) {
  auto& req = *st.req;
  const auto& e = *req.selected[slot];
  if (req.mirror_base != nullptr) {
    return {req.mirror_base + req.plan.mirror_data_offset[slot] - e.header_bytes(), e.header_bytes()};
  }
  return {req.side.data() + req.plan.header_side_offset[slot], e.header_bytes()};
}

// A tensor's last byte arrived: check its header against the index and, when asked, its hashes.
// Runs on the reader that completed it, so verification spreads over the workers.
result<void> finish_tensor(pipeline_state& st, std::size_t slot) {
  auto& req = *st.req;
  if (req.with_headers) {
    const auto& e = *req.selected[slot];
    auto header = format::parse_tensor_header(header_bytes(st, slot), st.index->header, e, st.source->name());
    if (!header) return header.error();
    if (req.options.decryption != nullptr && e.data_length > 0) {
      // The whole tensor is here: decrypt it in place on this worker (tensors spread over workers).
      auto t0 = clock_type::now();
      auto ok = format::decrypt_tensor(*header, req.data_dst[slot].first(e.data_length), *req.options.decryption,
                                       st.source->name());
      st.decrypt_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count();
      if (!ok) return ok.error();
    }
    if (req.options.verify) {
      auto t0 = clock_type::now();
      auto data = e.data_length > 0 ? std::span<const std::byte>(req.data_dst[slot]) : std::span<const std::byte>();
      auto ok = format::verify_tensor(*header, data, st.source->name());
      st.verify_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count();
      if (!ok) return ok.error();
    }
  }
  st.tensors_done.fetch_add(1, std::memory_order_relaxed);
  return {};
}

result<void> count_down(pipeline_state& st, const load_range& r) {
  for (const plan_piece& p : r.pieces) {
    if (p.what == plan_piece::kind::gap) continue;
    if (st.remaining[p.slot].fetch_sub(p.length_bytes, std::memory_order_acq_rel) == p.length_bytes) {
      TZ_CHECK(finish_tensor(st, p.slot));
    }
  }
  return {};
}

void report_progress(pipeline_state& st, std::uint64_t range_bytes) {
  std::uint64_t done = st.bytes_done.fetch_add(range_bytes, std::memory_order_relaxed) + range_bytes;
  if (!st.req->options.on_progress) return;
  std::lock_guard lock(st.progress_mutex);
  st.req->options.on_progress({done, st.req->plan.read_bytes, st.tensors_done.load(), st.req->selected.size()});
}

// Host destination, no transform: read straight into the destination memory.
task<result<void>> read_direct(pipeline_state& st, const load_range& r) {
  auto& req = *st.req;
  if (req.mirror_base != nullptr) {
    std::span<std::byte> dst(req.mirror_base + r.mirror_offset, r.length_bytes);
    // Fault fresh 4 KiB pages here, on this worker, right before the copy lands in them (one
    // madvise instead of a fault per page). Huge pages are left to fault inside the copy: each
    // 2 MiB page is zeroed and then overwritten while still in cache, where populating the whole
    // range first evicts the zeroed pages before the copy (load_bench, pre-touched memory:
    // 14.4-18.3 GB/s without, 11.5-16.3 GB/s with).
    if (req.options.prefault && !req.options.huge_pages) prefault(dst);
    std::span<std::byte> one[1] = {dst};
    co_return co_await st.source->read(r.offset_bytes, one);
  }
  std::vector<std::span<std::byte>> spans;
  spans.reserve(r.pieces.size());
  for (const plan_piece& p : r.pieces) spans.push_back(piece_destination(st, r, p));
  co_return co_await st.source->read(r.offset_bytes, spans);
}

// Transform path: read into a lease, run the stage on it, copy the pieces out, return the lease.
task<result<void>> read_staged(pipeline_state& st, const load_range& r) {
  TZ_CO_TRY(l, co_await st.leases->acquire());
  auto bytes = l.bytes().first(r.length_bytes);
  std::span<std::byte> one[1] = {bytes};
  TZ_CO_CHECK(co_await st.source->read(r.offset_bytes, one));
  TZ_CO_CHECK(co_await st.req->options.stage->transform(r, bytes));
  for (const plan_piece& p : r.pieces) {
    auto dst = piece_destination(st, r, p);
    std::memcpy(dst.data(), bytes.data() + (p.offset_bytes - r.offset_bytes), p.length_bytes);
  }
  co_return result<void>{};
}

// A reader should only fail through result values; anything thrown (bad_alloc, a bug) still ends
// the load with an error rather than a crash.
error unexpected_failure(const std::string& source, std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return make_error(errc::io, source + ": a reader failed: " + x.what());
  } catch (...) {
    return make_error(errc::io, source + ": a reader failed with an unknown exception");
  }
}

task<void> reader(pipeline_state& st) {
  const auto& ranges = st.req->plan.ranges;
  while (!st.failed.load(std::memory_order_relaxed)) {
    std::size_t i = st.next_range.fetch_add(1, std::memory_order_relaxed);
    if (i >= ranges.size()) break;
    const load_range& r = ranges[i];
    result<void> ok;
    if (st.req->options.stage != nullptr) {
      ok = co_await read_staged(st, r);
    } else {
      ok = co_await read_direct(st, r);
    }
    if (!ok) {
      st.fail(ok.error());
      break;
    }
    if (auto counted = count_down(st, r); !counted) {
      st.fail(counted.error());
      break;
    }
    report_progress(st, r.length_bytes);
  }
}

}  // namespace

task<result<load_timings>> loader::run_pipeline(scheduler& sched, pipeline_request& req) {
  pipeline_state st;
  st.req = &req;
  st.index = index_.get();
  st.source = source_.get();
  st.remaining = std::make_unique<std::atomic<std::uint64_t>[]>(req.selected.size());
  for (std::size_t slot = 0; slot < req.selected.size(); ++slot) {
    st.remaining[slot] = req.plan.tensor_read_bytes[slot];
    if (req.plan.tensor_read_bytes[slot] == 0) {
      TZ_CO_CHECK(finish_tensor(st, slot));
    }
  }
  unsigned readers = std::max<std::size_t>(1, std::min<std::size_t>(req.options.readers, req.plan.ranges.size()));
  std::optional<lease_ring> ring;
  if (req.options.stage != nullptr) {
    std::uint64_t largest = 0;
    for (const auto& r : req.plan.ranges) largest = std::max(largest, r.length_bytes);
    if (largest > 0) ring.emplace(readers, largest);
    st.leases = ring ? &*ring : nullptr;
  }
  auto t0 = clock_type::now();
  wait_group group;
  group.add(readers);
  for (unsigned i = 0; i < readers; ++i) {
    boost::asio::co_spawn(sched.worker_executor(i % sched.thread_count()), reader(st),
                          [&st, &group](std::exception_ptr e) {
                            if (e) st.fail(unexpected_failure(st.source->name(), e));
                            group.done();
                          });
  }
  co_await group.wait();
  if (st.first_error) co_return *st.first_error;
  load_timings t;
  t.read_s = seconds_since(t0);
  t.verify_s = static_cast<double>(st.verify_ns.load()) * 1e-9;
  t.decrypt_s = static_cast<double>(st.decrypt_ns.load()) * 1e-9;
  co_return t;
}

}  // namespace tz

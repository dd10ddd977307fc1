// _C.plan_partition, _C.plan_slice, _C.chunk_bounds, _C.load_extents and _C.load_extents_to_device
// (see partial.hpp, API.md).
#include "partial.hpp"

#include "keys.hpp"

#include "tz/engine/partial_load.hpp"

#include <pybind11/stl.h>

namespace tz::py {

namespace {

using part_tuple = std::tuple<std::size_t, std::uint64_t, std::uint64_t>;                 // index, begin, length
using extent_tuple = std::tuple<std::size_t, std::uint64_t, std::uint64_t, std::uint64_t>;  // + buffer offset

pyb::dict partition(pyb::handle reader, unsigned world, std::optional<std::vector<std::size_t>> which,
                    bool whole_tensors, std::uint64_t align_bytes) {
  auto [sched, l] = reader_loader(reader);
  auto plan = take(plan_partition(l->index(), which.value_or(std::vector<std::size_t>{}), world,
                                  {.whole_tensors = whole_tensors, .align_bytes = align_bytes}));
  pyb::list parts;
  for (const auto& rank : plan.parts) {
    std::vector<part_tuple> mine;
    for (const auto& p : rank) mine.emplace_back(p.index, p.data_begin_bytes, p.length_bytes);
    parts.append(pyb::cast(mine));
  }
  pyb::dict d;
  d["begin"] = plan.begin;
  d["parts"] = parts;
  d["flat_offset"] = plan.flat_offset;
  d["tensors"] = plan.tensors;
  return d;
}

std::vector<extent_tuple> slice(pyb::handle reader, std::size_t index, unsigned dim, std::uint64_t start,
                                std::uint64_t stop) {
  auto [sched, l] = reader_loader(reader);
  std::vector<extent_tuple> out;
  for (const auto& s : take(plan_slice(l->index(), index, dim, start, stop)))
    out.emplace_back(s.part.index, s.part.data_begin_bytes, s.part.length_bytes, s.out_offset_bytes);
  return out;
}

// What a load of extents reports, host or device (timings: see tz::load_timings).
pyb::dict extent_stats(const extent_load_result& r) {
  pyb::dict t;
  t["open_s"] = r.timings.open_s, t["prepare_s"] = r.timings.prepare_s, t["transfer_s"] = r.timings.transfer_s;
  t["total_s"] = r.timings.total_s, t["read_s"] = r.timings.read_s, t["verify_s"] = r.timings.verify_s;
  t["decrypt_s"] = r.timings.decrypt_s;
  pyb::dict d;
  d["read_bytes"] = r.read_bytes;
  d["data_bytes"] = r.data_bytes;
  d["timings"] = t;
  return d;
}

pyb::dict load(pyb::handle reader, const std::vector<extent_tuple>& extents, pyb::buffer buffer, bool verify,
               unsigned readers, std::shared_ptr<decryption_keys> keys, std::uint64_t gap_merge_bytes,
               std::uint64_t range_bytes) {
  auto [sched, l] = reader_loader(reader);
  pyb::buffer_info info = buffer.request(true);
  if (info.itemsize != 1 || info.ndim != 1 || (info.strides.size() == 1 && info.strides[0] != 1))
    throw pyb::value_error("load_extents: the buffer must be a contiguous 1-D byte buffer");
  std::span<std::byte> into(static_cast<std::byte*>(info.ptr), static_cast<std::size_t>(info.size));
  std::vector<tensor_extent> xs;
  for (const auto& [index, begin, length, at] : extents) {
    if (at > into.size() || length > into.size() - at)
      throw pyb::value_error("load_extents: extent of tensor " + std::to_string(index) + " at buffer offset " +
                             std::to_string(at) + " (" + std::to_string(length) + " bytes) outside a buffer of " +
                             std::to_string(into.size()) + " bytes");
    xs.push_back({{index, begin, length}, into.subspan(at, length)});
  }
  extent_options o;
  o.verify = verify;
  o.readers = readers;
  o.gap_merge_bytes = gap_merge_bytes;
  o.range_bytes = range_bytes;
  if (keys) o.decryption = keys->decryption;
  result<extent_load_result> got;
  {
    pyb::gil_scoped_release release;
    try {
      got = load_extents(*sched, *l, std::move(xs), std::move(o));
    } catch (...) {
      got = make_error(errc::io, l->source().name() + ": " + describe_exception(std::current_exception()));
    }
  }
  return extent_stats(take(std::move(got)));
}

// The same into device memory the caller owns (a CUDA tensor's storage: its data_ptr() and size),
// through the process's context of that device and its bounded pinned ring.
pyb::dict load_to_device(pyb::handle reader, const std::vector<extent_tuple>& extents, int device, std::uintptr_t address,
                         std::uint64_t size_bytes, bool verify, unsigned readers, std::shared_ptr<decryption_keys> keys,
                         std::uint64_t gap_merge_bytes) {
  auto [sched, l] = reader_loader(reader);
  std::vector<device_extent> xs;
  for (const auto& [index, begin, length, at] : extents) xs.push_back({{index, begin, length}, at});
  device_extent_options o;
  o.verify = verify;
  o.readers = readers;
  o.gap_merge_bytes = gap_merge_bytes;
  if (keys) o.decryption = keys->decryption;
  const device_region region{reinterpret_cast<void*>(address), size_bytes, device};
  result<device_extent_result> got;
  {
    pyb::gil_scoped_release release;
    try {
      auto ctx = device_context::shared(device);
      got = ctx ? load_extents_to_device(*sched, **ctx, *l, std::move(xs), region, std::move(o))
                : result<device_extent_result>(ctx.error());
    } catch (...) {
      got = make_error(errc::io, l->source().name() + ": " + describe_exception(std::current_exception()));
    }
  }
  auto r = take(std::move(got));
  auto d = extent_stats(r);
  d["ring_bytes"] = r.ring_bytes;
  d["pinned_bytes_max"] = r.pinned_bytes_max;
  d["readers"] = r.readers;
  return d;
}

}  // namespace

void register_partial(pyb::module_& m) {
  m.def("plan_partition", &partition, pyb::arg("reader"), pyb::arg("world"), pyb::arg("indices") = pyb::none(),
        pyb::kw_only(), pyb::arg("whole_tensors") = false, pyb::arg("align") = 4096,
        "Per-rank shares of the data of tensors `indices` (None = all), balanced by bytes (tz::plan_partition).");
  m.def("plan_slice", &slice, pyb::arg("reader"), pyb::arg("index"), pyb::arg("dim"), pyb::arg("start"),
        pyb::arg("stop"), "The stretches (index, begin, length, out_offset) of elements [start, stop) along dim.");
  m.def("chunk_bounds", &chunk_bounds, pyb::arg("size"), pyb::arg("parts"), pyb::arg("k"),
        "[begin, end) of torch.chunk(x, parts)[k] along a dimension of `size`.");
  m.def("load_extents", &load, pyb::arg("reader"), pyb::arg("extents"), pyb::arg("buffer"), pyb::kw_only(),
        pyb::arg("verify") = false, pyb::arg("readers") = 0u, pyb::arg("decryption") = pyb::none(),
        pyb::arg("gap_merge") = std::uint64_t{64} << 10, pyb::arg("range_bytes") = 0,
        "Reads (index, begin, length, buffer_offset) stretches of tensors into `buffer` (tz::load_extents);"
        " returns read_bytes, data_bytes and timings.");
  m.def("load_extents_to_device", &load_to_device, pyb::arg("reader"), pyb::arg("extents"), pyb::arg("device"),
        pyb::arg("address"), pyb::arg("size"), pyb::kw_only(), pyb::arg("verify") = false, pyb::arg("readers") = 0u,
        pyb::arg("decryption") = pyb::none(), pyb::arg("gap_merge") = std::uint64_t{64} << 10,
        "Reads (index, begin, length, offset) stretches of tensors into device memory [address, address + size) on"
        " CUDA device `device` through the bounded pinned ring (tz::load_extents_to_device); returns read_bytes,"
        " data_bytes, timings, ring_bytes, pinned_bytes_max and readers. Work on the memory enqueued earlier on"
        " other streams must have completed.");
}

}  // namespace tz::py

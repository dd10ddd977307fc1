// Partial loads: stretches of tensors' data (a rank's share of a checkpoint, a tensor-parallel
// slice) read straight into caller memory, and the pure planners that say which stretches.
// The engine has no distributed runtime: a caller runs the fan-out with its own collectives.
#pragma once

#include "tz/base/error.hpp"
#include "tz/base/task.hpp"
#include "tz/engine/device_load.hpp"
#include "tz/engine/loader.hpp"
#include "tz/engine/scheduler.hpp"
#include "tz/format/tensorizer.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tz {

// Bytes [data_begin_bytes, data_begin_bytes + length_bytes) of tensor `index`'s deserialized data.
struct tensor_part {
  std::size_t index = 0;  // position in loader::index()
  std::uint64_t data_begin_bytes = 0;
  std::uint64_t length_bytes = 0;
  bool whole(const format::tensor_entry& e) const noexcept {
    return data_begin_bytes == 0 && length_bytes == e.deserialized_bytes;
  }
};

// A part and where it lands (exactly length_bytes long).
struct tensor_extent {
  tensor_part part;
  std::span<std::byte> bytes;
};

// ---- partitions -------------------------------------------------------------------------------

struct partition_options {
  // Cut only between tensors: every tensor is read whole by one rank, so a verified load checks
  // each tensor's stored hash on its owner. Shares are then balanced to within one tensor.
  bool whole_tensors = false;
  // Cuts inside a tensor fall on multiples of this, relative to its data start: whole pages for
  // plain data, the cipher chunk (2 MiB) for encrypted files so no chunk is read by two ranks.
  std::uint64_t align_bytes = 4096;
};

// The layout of a partitioned load: the selected tensors' data back to back in file order (the
// "flat" model); rank r owns flat bytes [begin[r], begin[r + 1]) as `parts[r]`, in flat order.
struct partition_plan {
  std::vector<std::uint64_t> begin;             // world + 1 entries; begin[world] = total
  std::vector<std::vector<tensor_part>> parts;  // per rank
  std::vector<std::uint64_t> flat_offset;       // per selected tensor (file order), into the flat model
  std::vector<std::size_t> tensors;             // the selected index positions, file order
};

// Splits the data of tensors `which` (empty = all) into `world` shares balanced by bytes: each
// share is a consecutive stretch of the flat model, cut at the nearest allowed point (an aligned
// offset inside a tensor, or a tensor boundary with whole_tensors) to world-equal shares. Meta
// tensors (zeros, nothing stored) are whole parts of the rank whose stretch holds them. Pure.
// errc::invalid_argument for world 0, a zero alignment or a bad selection.
result<partition_plan> plan_partition(const format::file_index& index, std::vector<std::size_t> which,
                                      unsigned world, const partition_options& options = {});

// ---- tensor-parallel slices -------------------------------------------------------------------

// [begin, end) of part k of n parts of `size` elements, as torch.chunk(x, n)[k] cuts them: parts
// of ceil(size / n), the last ones shorter or empty.
std::pair<std::uint64_t, std::uint64_t> chunk_bounds(std::uint64_t size, std::uint64_t parts, std::uint64_t k) noexcept;

// The stretches of tensor `index` that hold elements [start, stop) along dimension `dim`, in
// C order, with `out_offset` their place in the dense slice (shape[dim] replaced by stop - start).
// A slice of dimension 0 is one stretch; of a later dimension one per outer row, merged when
// adjacent. errc::invalid_argument naming the tensor for a bad dimension or bounds, a meta or
// opaque-size mismatch. Pure.
struct slice_stretch {
  tensor_part part;
  std::uint64_t out_offset_bytes = 0;
};
result<std::vector<slice_stretch>> plan_slice(const format::file_index& index, std::size_t tensor, unsigned dim,
                                              std::uint64_t start, std::uint64_t stop);

// ---- the load ---------------------------------------------------------------------------------

struct extent_options : load_options {
  // Stretches of one tensor closer than this are read as one (the bytes between are read and
  // dropped): fewer, larger reads for column slices of short rows.
  std::uint64_t gap_merge_bytes = 64 << 10;
};

struct extent_load_result {
  load_timings timings;
  std::uint64_t read_bytes = 0;  // bytes read from the source: headers, gaps, whole cipher chunks included
  std::uint64_t data_bytes = 0;  // bytes delivered into the extents
};

// Reads each extent's bytes into its span. Whole tensors go through the usual pipeline (headers
// checked, decrypted, verified when asked); parts of tensors are read alone: plain data straight
// into the span (coalesced per gap_merge_bytes), encrypted data as the whole cipher chunks that
// cover it, decrypted (MACs checked) then copied out. Meta tensors' parts are zero-filled.
// Completes when every byte is in place. Fails as a load does, plus errc::invalid_argument for a
// part outside its tensor or a span of the wrong size, and errc::unsupported for verify with a
// part that is not a whole tensor: a stored hash covers the whole tensor, so a part cannot be
// checked (verify whole tensors on their owner: partition_options::whole_tensors).
task<result<extent_load_result>> async_load_extents(scheduler& sched, const loader& l, std::vector<tensor_extent> extents,
                                                    extent_options options = {});
result<extent_load_result> load_extents(scheduler& sched, const loader& l, std::vector<tensor_extent> extents,
                                        extent_options options = {});

// ---- onto a device ----------------------------------------------------------------------------

// Caller memory on a device that extents land in: [data, data + size_bytes) on `device` (a CUDA
// tensor's storage, say). Never dereferenced on the host; it must outlive the load.
struct device_region {
  void* data = nullptr;
  std::uint64_t size_bytes = 0;
  int device = 0;
};

// A part and its place in the region: bytes [offset_bytes, offset_bytes + part.length_bytes).
struct device_extent {
  tensor_part part;
  std::uint64_t offset_bytes = 0;
};

// A device load's options (the staging ring's shape among them) plus the gap merge of extents.
struct device_extent_options : device_load_options {
  std::uint64_t gap_merge_bytes = 64 << 10;  // as extent_options::gap_merge_bytes
};

struct device_extent_result : extent_load_result {
  std::uint64_t ring_bytes = 0;        // the pinned ring the load took
  std::uint64_t pinned_bytes_max = 0;  // most of it held at once (<= ring_bytes)
  unsigned readers = 0;                // reads kept in flight
};

// Reads each extent's bytes into its place in `region` through the context's bounded ring of
// pinned slots: reads land in a slot, are checked there (headers; whole tensors decrypted and, with
// verify, hashed; encrypted parts opened from their whole cipher chunks), and are copied to the
// device on the context's streams; each copy's completion returns its slot. So the pinned memory
// of the load is the ring, whatever the extents add up to. Meta tensors' parts are zero-filled on
// the device. Completes when every copy has completed. Fails as load_extents does, plus
// errc::invalid_argument for an extent outside the region or a region on another device than the
// context's, errc::no_device / errc::cuda from the CUDA stage, errc::unsupported for cipher chunks
// larger than a slot. On failure no copy is in flight.
task<result<device_extent_result>> async_load_extents_to_device(scheduler& sched, device_context& ctx, const loader& l,
                                                                std::vector<device_extent> extents, device_region region,
                                                                device_extent_options options = {});
result<device_extent_result> load_extents_to_device(scheduler& sched, device_context& ctx, const loader& l,
                                                    std::vector<device_extent> extents, device_region region,
                                                    device_extent_options options = {});

}  // namespace tz

// The plan of a load to device memory: reads no longer than one staging slot, each holding whole
// tensors (headers included) or whole cipher chunks of one large tensor, and the device layout.
#pragma once

#include "tz/error.hpp"
#include "tz/format/tensorizer.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace tz {

// Tensors start at multiples of this in the device allocation (what cudaMalloc itself guarantees
// for an allocation, so every tensor is as aligned as if it had its own).
inline constexpr std::uint64_t device_align_bytes = 256;

// A split tensor's ranges end at multiples of this (relative to its data start) when it is not
// encrypted: O_DIRECT-friendly page multiples.
inline constexpr std::uint64_t plain_split_align_bytes = 4096;

inline constexpr std::uint32_t no_split = std::numeric_limits<std::uint32_t>::max();

// A piece of a device range: a tensor's header (parsed on the host, never uploaded) or a slice of
// its data, data_begin_bytes into the tensor's data.
struct device_piece {
  std::uint32_t slot = 0;            // position in the selection
  bool header = false;
  std::uint64_t offset_bytes = 0;    // file offset
  std::uint64_t length_bytes = 0;
  std::uint64_t data_begin_bytes = 0;
};

// One read into one staging slot: file bytes [offset_bytes, offset_bytes + length_bytes). Bytes
// between pieces (gaps, unselected tensors) are read and ignored, since one read beats two.
struct device_range {
  std::uint64_t offset_bytes = 0;
  std::uint64_t length_bytes = 0;
  std::vector<device_piece> pieces;  // file order
  // A tensor too large for one slot is split over consecutive ranges holding only its data; its
  // header is read before the load (a header pass). split_slot names it, part is the position
  // of this range among its ranges (the order in which its hash is fed).
  std::uint32_t split_slot = no_split;
  std::uint32_t part = 0;
};

struct device_plan {
  std::vector<device_range> ranges;
  std::vector<std::uint64_t> device_offset;  // per selected tensor, device_align_bytes multiples
  std::uint64_t device_bytes = 0;            // size of the one device allocation
  std::vector<std::uint32_t> part_count;     // per selected tensor: ranges it is split over (0: not split)
  std::uint64_t read_bytes = 0;              // sum of range lengths
  std::uint64_t data_bytes = 0;              // sum of selected stored data lengths
};

struct device_plan_options {
  std::uint64_t range_bytes = 16ull << 20;  // the staging slot size: no range is longer
  std::uint64_t gap_merge_bytes = 64 << 10; // read through gaps up to this size
  bool with_headers = true;                 // .tensors: headers are read and parsed
};

// True when the tensor (its header too, with_headers) cannot fit one range and must be split;
// split tensors need their header read first and a split alignment (make_device_plan).
bool needs_split(const format::tensor_entry& e, const device_plan_options& options) noexcept;

// Plans the reads of `selected` (entries of one index, file order, no overlaps). `split_align_bytes`
// has one value per selected tensor, used only for split ones: split points fall on its multiples
// relative to the data start (the cipher chunk size for encrypted tensors, plain_split_align_bytes
// otherwise). Meta and zero-length tensors get device space (meta: their zero bytes) but no data
// pieces. Pure. Fails with errc::unsupported when an alignment does not fit a range (a cipher chunk
// larger than a staging slot), and errc::invalid_argument for a zero range size or alignment.
result<device_plan> make_device_plan(std::span<const format::tensor_entry* const> selected,
                                     std::span<const std::uint64_t> split_align_bytes,
                                     const device_plan_options& options);

// Reorders the ranges so that up to `width` split tensors advance together, their parts
// taken round-robin (each tensor's parts keep their order; unsplit ranges keep theirs). A split
// tensor's hash is fed part by part in order, so in file order a ring smaller than one tensor
// hashes on one core at a time; interleaved, `width` tensors hash at once. Pure.
void interleave_split_tensors(device_plan& plan, std::size_t width);

}  // namespace tz

// The plan of a load, host or device alike: bounded reads of large linear stretches of the file,
// each listing the tensor headers and data slices it holds. Pure data; no I/O.
#pragma once

#include "tz/base/error.hpp"
#include "tz/format/tensorizer.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace tz {

inline constexpr std::uint32_t no_split = std::numeric_limits<std::uint32_t>::max();

// Split points inside plain (unencrypted) tensor data fall on multiples of this, relative to the
// data start: whole pages, so O_DIRECT reads of the parts stay aligned.
inline constexpr std::uint64_t plain_split_align_bytes = 4096;

// A piece of a range: a tensor's header, a slice of its data (data_begin_bytes into the tensor's
// data), or a gap (bytes between selected tensors, read because one larger read beats two).
struct plan_piece {
  enum class kind : std::uint8_t { header, data, gap };
  kind what = kind::data;
  std::uint32_t tensor = 0;          // position in the selection (header and data pieces)
  std::uint64_t offset_bytes = 0;    // file offset
  std::uint64_t length_bytes = 0;
  std::uint64_t data_begin_bytes = 0;
};

// One read: file bytes [offset_bytes, offset_bytes + length_bytes), covered exactly by `pieces`
// in file order. A tensor whose header and data fit one range is always whole in one range (its
// header piece directly before its data piece). A larger tensor is split: its data is cut into
// consecutive ranges holding nothing else, and its header is read before the load (the header
// pass); split_tensor names it and `part` is the position of this range among its ranges.
struct load_range {
  std::uint64_t offset_bytes = 0;
  std::uint64_t length_bytes = 0;
  std::vector<plan_piece> pieces;
  std::uint32_t split_tensor = no_split;
  std::uint32_t part = 0;
};

struct plan_options {
  // Target length of a read: tensors are packed whole into ranges up to this long, and a tensor
  // longer than this (header included) is split.
  std::uint64_t range_bytes = 16ull << 20;
  // Hard bound on a range's length (a staging slot); a split tensor's alignment unit must fit it.
  std::uint64_t range_limit_bytes = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t gap_merge_bytes = 64 << 10;  // read through gaps up to this size
  bool with_headers = true;                  // .tensors: each tensor's header is read and checked
  // Ranges that begin before this file offset are at most ramp_range_bytes long (0: no ramp). For
  // tensors as they land from a remote source: the first tensors arrive after a few short reads
  // side by side instead of with the first wave of full-size ones.
  std::uint64_t ramp_until_offset = 0;
  std::uint64_t ramp_range_bytes = 0;
};

// The target length of a range that begins at `offset` (the ramp's, before ramp_until_offset).
std::uint64_t range_bytes_at(const plan_options& options, std::uint64_t offset) noexcept;

struct load_plan {
  std::vector<load_range> ranges;
  std::uint64_t read_bytes = 0;             // sum of range lengths
  std::uint64_t data_bytes = 0;             // sum of the selected tensors' stored data lengths
  std::vector<std::uint32_t> part_count;    // per selected tensor: ranges it is split over (0: whole)
};

// True when the tensor (with its header, with_headers) does not fit one range and will be split.
bool needs_split(const format::tensor_entry& e, const plan_options& options) noexcept;

// Checks a selection of index positions (in range, none twice; empty = every tensor) and returns
// the entries in file order. errc::invalid_argument naming the source and the position.
result<std::vector<const format::tensor_entry*>> select_in_file_order(const format::file_index& index,
                                                                      std::vector<std::size_t> which);

// Plans the reads of `selected` (entries of one index, file order, no overlaps).
// `split_align_bytes` has one value per selected tensor, used only for split ones: their cuts fall
// on its multiples relative to the data start (the cipher chunk for encrypted tensors,
// plain_split_align_bytes otherwise); a part holds at least one unit, so may exceed range_bytes up
// to range_limit_bytes. Data-less tensors get a header piece (with_headers) or nothing. Fails
// with errc::unsupported when a unit exceeds range_limit_bytes (a cipher chunk larger than a
// staging slot), errc::invalid_argument for a zero range size or alignment.
result<load_plan> make_plan(std::span<const format::tensor_entry* const> selected,
                            std::span<const std::uint64_t> split_align_bytes, const plan_options& options);

// Cuts `which` (index positions, in the caller's order) into consecutive batches of at most
// `cap_bytes` of the tensors' deserialized bytes, a larger tensor alone: for walks that load a
// model piece by piece into bounded memory (the CLI's tensor walk, the facade's verify). Pure.
std::vector<std::vector<std::size_t>> batches_by_bytes(const format::file_index& index,
                                                       std::span<const std::size_t> which, std::uint64_t cap_bytes);

// Reorders the ranges so that up to `width` split tensors advance together, their parts
// taken round-robin (each tensor's parts keep their order; whole ranges keep theirs). A split
// tensor's SHA-256 is fed part by part in order, so in file order one tensor hashes on one core at
// a time; interleaved, `width` tensors hash at once. Tensors start longest first (whole ranges
// last), so that no long hash chain is left to run alone at the end; in file order when
// !longest_first. Pure.
void interleave_split_tensors(load_plan& plan, std::size_t width, bool longest_first = true);

}  // namespace tz

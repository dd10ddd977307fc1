// The plan of a load: a few large contiguous byte ranges, each listing the tensor bytes it covers.
#pragma once

#include "tz/error.hpp"
#include "tz/format/tensorizer.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tz {

// A piece of a range: a tensor's header, a slice of its data, or a gap between selected tensors
// (read rather than skipped, because one larger read beats two syscalls).
struct plan_piece {
  enum class kind : std::uint8_t { header, data, gap };
  kind what = kind::data;
  std::uint32_t slot = 0;           // position in the selection (header and data pieces)
  std::uint64_t offset_bytes = 0;   // file offset
  std::uint64_t length_bytes = 0;
  std::uint64_t side_offset = 0;    // header and gap pieces: where they go in the side buffer
};

// One read: file bytes [offset_bytes, offset_bytes + length_bytes).
struct load_range {
  std::uint64_t offset_bytes = 0;
  std::uint64_t length_bytes = 0;
  // Where the range lands in a "mirror" destination: one allocation holding the selected runs of
  // the file back to back, each at the same offset modulo 4 KiB as in the file (so O_DIRECT reads
  // go straight into it with a single span per range).
  std::uint64_t mirror_offset = 0;
  std::vector<plan_piece> pieces;   // in file order, covering the range exactly
};

struct plan_options {
  std::uint64_t range_bytes = 16ull << 20;    // the largest single read
  std::uint64_t gap_merge_bytes = 64 << 10;   // read through gaps up to this size
  // Split points inside tensor data fall on multiples of this (relative to the data start), so a
  // stage working in chunks (decryption: 2 MiB MAC chunks) sees whole chunks. 1 = anywhere.
  std::uint64_t split_align_bytes = 1;
};

struct load_plan {
  std::vector<load_range> ranges;
  std::uint64_t read_bytes = 0;    // sum of range lengths
  std::uint64_t data_bytes = 0;    // sum of selected data lengths
  std::uint64_t side_bytes = 0;    // headers + gaps (scatter layout)
  std::uint64_t mirror_bytes = 0;  // size of the mirror allocation
  // Per selected tensor: how many of its bytes (header + data) the plan reads; the pipeline counts
  // them down to know when a tensor is complete.
  std::vector<std::uint64_t> tensor_read_bytes;
  // Per selected tensor: where its data starts in the mirror (header and data pieces set it).
  std::vector<std::uint64_t> mirror_data_offset;
  // Per selected tensor with a header piece: where the header goes in the side buffer.
  std::vector<std::uint64_t> header_side_offset;
};

// Plans the reads of `selected` (entries in file order, no overlaps; entries of one index).
// `with_headers`: read each tensor's header too (.tensors files; safetensors have none).
// Pure: no I/O, no allocation beyond the plan itself.
// Checks a selection of index positions (in range, none twice; empty = every tensor) and returns
// the entries in file order. errc::invalid_argument naming the source and the position.
result<std::vector<const format::tensor_entry*>> select_in_file_order(const format::file_index& index,
                                                                      std::vector<std::size_t> which);

load_plan make_plan(std::span<const format::tensor_entry* const> selected, bool with_headers,
                    const plan_options& options);

}  // namespace tz

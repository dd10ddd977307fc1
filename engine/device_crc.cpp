// A verified device load's CRC32 on the GPU: result memory, the kernels launched behind a range's
// copies, and the results read back, joined per tensor and compared at the end of the load.
#include "device_crc.hpp"

#include "tz/cuda/crc32.hpp"

#include <algorithm>

namespace tz {

std::uint64_t device_crc::bytes_for(const load_plan& plan) noexcept {
  std::uint64_t n = 0;
  for (const auto& r : plan.ranges)
    for (const auto& piece : r.pieces) n += piece.what == plan_piece::kind::data ? 1 : 0;
  return n * sizeof(std::uint32_t);
}

result<cuda::after_copies_fn> device_crc::crc_for(const load_range& r, std::byte* device_base,
                                                  std::span<const std::uint64_t> tensor_offsets) {
  std::vector<cuda::crc32_job> jobs;
  std::vector<piece_result> mine;
  for (const plan_piece& piece : r.pieces) {
    if (piece.what != plan_piece::kind::data) continue;
    jobs.push_back({device_base + tensor_offsets[piece.tensor] + piece.data_begin_bytes, piece.length_bytes});
    mine.push_back({piece.tensor, piece.data_begin_bytes, piece.length_bytes, 0});
  }
  const std::uint64_t first = next_.fetch_add(jobs.size());
  if (first + jobs.size() > capacity_)  // the plan's data pieces are counted up front; a guard all the same
    return make_error(errc::invalid_argument, "CRC32 on the device: more data pieces than the plan holds");
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i].result = first + i;
  {
    std::lock_guard lock(mutex_);
    pieces_.insert(pieces_.end(), mine.begin(), mine.end());
  }
  return cuda::after_copies_fn([this, first, jobs = std::move(jobs)](void* stream, int) -> result<void> {
    return cuda::launch_crc32(jobs, results() + first, stream);
  });
}

result<void> device_crc::check(const pipeline& p) const {
  const std::uint64_t used = next_.load();
  std::vector<std::uint32_t> host(used);
  if (used != 0) TZ_CHECK(cuda::download(*buffer_, offset_, std::as_writable_bytes(std::span(host))));
  std::vector<piece_result> pieces;
  {
    std::lock_guard lock(mutex_);
    pieces = pieces_;
  }
  std::sort(pieces.begin(), pieces.end(), [](const piece_result& a, const piece_result& b) {
    return a.tensor != b.tensor ? a.tensor < b.tensor : a.data_begin_bytes < b.data_begin_bytes;
  });
  const std::string& source = p.source->name();
  auto next = pieces.begin();
  for (std::size_t t = 0; t < p.selected.size(); ++t) {
    const format::tensor_header& h = p.headers[t];  // split or whole: the load keeps them all
    std::uint32_t crc = crc32(h.hash_prefix);
    std::uint64_t covered = 0;
    for (; next != pieces.end() && next->tensor == t; ++next) {
      if (next->data_begin_bytes != covered) break;  // a hole or an overlap: reported below
      crc = crc32_combine(crc, host[next->result], next->length_bytes);
      covered += next->length_bytes;
    }
    if (covered != h.data_length) {
      return make_error(errc::invalid_argument, source + ": tensor '" + h.name + "': CRC32 on the device covered " +
                                                    std::to_string(covered) + " of its " +
                                                    std::to_string(h.data_length) + " data bytes");
    }
    if (format::has_crc32(h)) TZ_CHECK(format::check_tensor_hashes(h, crc, std::nullopt, source));
  }
  return {};
}

}  // namespace tz

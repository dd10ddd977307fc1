// Private to engine/: a verified device load's CRC32 on the GPU. The workers hash only SHA-256
// (the CRC32 is a tenth of the hashing work, and the bytes are on the device anyway); the device
// sink launches the CRC32 kernels (tz/cuda/crc32.hpp) behind each range's copy, one result per
// data piece. After the last copy the results are read back, joined per tensor with its header's
// hash prefix in data order (crc32_combine) and compared with the stored CRC32: a mismatch fails
// the load with the error the host path gives.
#pragma once

#include "pipeline.hpp"

#include "tz/cuda/cuda.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tz {

class device_crc {
 public:
  // The device bytes the results of `plan` take: a 4-byte word per data piece.
  static std::uint64_t bytes_for(const load_plan& plan) noexcept;

  // Results at `offset_bytes` (4-byte aligned) of `buffer`, the load's own allocation: no
  // allocation of its own, so no cudaFree (which waits for every stream of the device, other
  // loads' copies included) at the end of a verified load.
  device_crc(std::shared_ptr<cuda::device_buffer> buffer, std::uint64_t offset_bytes, const load_plan& plan) noexcept
      : buffer_(std::move(buffer)), offset_(offset_bytes), capacity_(bytes_for(plan) / sizeof(std::uint32_t)) {}

  // The work to run behind range r's copies: the CRC32 of each of its data pieces, which lie at
  // device_base + tensor_offsets[tensor] + data_begin_bytes. Reserves the range's results now.
  result<cuda::after_copies_fn> crc_for(const load_range& r, std::byte* device_base,
                                        std::span<const std::uint64_t> tensor_offsets);

  // Once every copy and launch has completed: reads the results back and checks each selected
  // tensor that stores a CRC32 (its header from p.headers, which a load with pipeline::crc_on_device
  // keeps), in file order; the first mismatch is returned as format::check_tensor_hashes words it.
  result<void> check(const pipeline& p) const;

 private:
  std::uint32_t* results() const noexcept {
    return reinterpret_cast<std::uint32_t*>(static_cast<std::byte*>(buffer_->data()) + offset_);
  }

  // Where one piece's result went.
  struct piece_result {
    std::uint32_t tensor = 0;
    std::uint64_t data_begin_bytes = 0;
    std::uint64_t length_bytes = 0;
    std::uint64_t result = 0;  // index into the results
  };

  std::shared_ptr<cuda::device_buffer> buffer_;
  std::uint64_t offset_ = 0;
  std::uint64_t capacity_ = 0;
  std::atomic<std::uint64_t> next_{0};
  mutable std::mutex mutex_;
  std::vector<piece_result> pieces_;
};

}  // namespace tz

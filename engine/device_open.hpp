// Private to engine/: decryption on the device. The checks leave an encrypted load's chunks sealed
// (landing::sealed); the device sink uploads the ciphertext as stored and, on the same stream right
// behind the copies, launches the secretbox kernels (tz/cuda/secretbox.hpp), which authenticate and
// decrypt every chunk in device memory and write one flag per chunk. After the last copy the flags
// are read back: a chunk whose MAC failed fails the load with the error the host path gives.
#pragma once

#include "pipeline.hpp"

#include "tz/cuda/cuda.hpp"
#include "tz/engine/device_context.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace tz {

class device_opener {
 public:
  // Device memory for a flag per chunk the selected tensors can have (chunks are at least 1 KiB,
  // format/FORMAT.md §9.4, so data bytes / 1 KiB + 1 per tensor bounds them) and a kernel scratch
  // per stream of the context's uploader, taken from the context's pool (no cudaMalloc or
  // cudaFree per load for models up to the pool's size). Errors as cuda::alloc_device.
  static result<std::unique_ptr<device_opener>> create(device_context& ctx,
                                                      std::span<const format::tensor_entry* const> selected);

  // The work to run behind a range's copies: open `sealed`, whose tensor `t` starts at device
  // address `tensor_base[t]`. Reserves the range's flags now; the returned function launches the
  // kernels on the stream it is given (tz::cuda::after_copies_fn).
  result<cuda::after_copies_fn> opener_for(std::vector<device_chunk> sealed, std::byte* device_base,
                                           std::span<const std::uint64_t> tensor_offsets);

  // Once every copy and launch has completed: reads the flags back and fails with the error of the
  // first chunk (in launch order) whose MAC did not match, naming `source`, the tensor and chunk.
  result<void> check(const std::string& source) const;

 private:
  device_opener(pooled_device_buffer aux, std::uint64_t flag_capacity, int streams) noexcept
      : aux_(std::move(aux)), flag_capacity_(flag_capacity), streams_(streams) {}
  std::uint8_t* flags() const noexcept { return static_cast<std::uint8_t*>(aux_.get().data()); }
  void* scratch(int stream_index) const noexcept;

  // The chunks of one range and the flags they were given.
  struct batch {
    std::uint64_t first_flag = 0;
    std::shared_ptr<const std::vector<device_chunk>> chunks;
  };

  pooled_device_buffer aux_;  // flags, then the per-stream scratch (a pooled buffer: maybe larger)
  std::uint64_t flag_capacity_ = 0;
  int streams_ = 0;
  std::atomic<std::uint64_t> next_flag_{0};
  mutable std::mutex mutex_;
  std::vector<batch> batches_;
};

}  // namespace tz

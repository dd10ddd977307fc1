// Private to the runtime build of cuda/: CUDA error wording and a scoped current-device switch.
#pragma once

#include "tz/cuda/cuda.hpp"

#include <cuda_runtime.h>

#include <string>
#include <string_view>

namespace tz::cuda::detail {

// "cuda:N" for messages.
std::string device_label(int device);

// An error naming the CUDA call, what it was doing, the device, and CUDA's error name and text.
// No-driver / no-device / invalid-device codes map to errc::no_device, the rest to errc::cuda.
error failure(std::string_view call, cudaError_t code, int device, std::string_view what);

// Fails with errc::no_device unless `device` is an index of an existing device.
result<void> check_device(int device, std::string_view what);

// Makes `device` current for this thread and restores the previous one on destruction, so that
// an embedding application's notion of "the current device" survives our calls.
class device_scope {
 public:
  static result<device_scope> enter(int device, std::string_view what);
  device_scope(device_scope&& other) noexcept : previous_(other.previous_) { other.previous_ = -1; }
  device_scope& operator=(device_scope&&) = delete;
  ~device_scope();

 private:
  explicit device_scope(int previous) noexcept : previous_(previous) {}
  int previous_ = -1;  // -1: nothing to restore
};

}  // namespace tz::cuda::detail

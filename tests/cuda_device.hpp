// The need of the suites that run on a CUDA device (cuda_test, device_load_test and their builds on
// the CUDA emulation): tz::cuda must see device 0. For tz_test::suite_needs (requirements.hpp).
#pragma once

#include "tz/cuda/cuda.hpp"

#include <string>

namespace tz_test {

// "" when tz::cuda sees a device, else why not.
inline std::string cuda_device_absent() {
  auto count = tz::cuda::device_count();
  if (!count) return count.error().message;
  if (*count > 0) return {};
  return tz::cuda::built_with_cuda() ? "no CUDA device is visible" : "this build has no CUDA stage";
}

}  // namespace tz_test

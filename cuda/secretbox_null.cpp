// The secretbox launcher of builds without the kernels: the null CUDA stage and the CUDA emulation.
#include "tz/cuda/secretbox.hpp"

#include <string>

namespace tz::cuda {

bool secretbox_kernels_available() noexcept { return false; }

result<void> launch_secretbox_open(std::span<const secretbox_job> jobs, std::span<const std::uint8_t, 32>,
                                   std::uint8_t*, void*, void*) {
  return make_error(errc::unsupported, "opening " + std::to_string(jobs.size()) +
                                           " encrypted chunk(s) on the GPU: this build has no secretbox kernels "
                                           "(built without nvcc, or on the CUDA emulation); decrypt on the host");
}

}  // namespace tz::cuda

// The CRC-32 launcher of builds without the CUDA stage: there are no kernels, every launch fails.
#include "tz/cuda/crc32.hpp"

#include <string>

namespace tz::cuda {

bool crc32_kernels_available() noexcept { return false; }

result<void> launch_crc32(std::span<const crc32_job> jobs, std::uint32_t*, void*) {
  return make_error(errc::unsupported, "CRC-32 of " + std::to_string(jobs.size()) +
                                           " device range(s): this build has no CRC-32 kernels (built without "
                                           "nvcc); hash the bytes on the host");
}

}  // namespace tz::cuda

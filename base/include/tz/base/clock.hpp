// Wall time for the timings reports give (open, set-up, a command's run): seconds on the steady
// clock since a point taken with std::chrono::steady_clock::now().
#pragma once

#include <chrono>

namespace tz {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace tz

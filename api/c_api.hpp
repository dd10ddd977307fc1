// The C ABI's internals (api/c_api*.cpp, never installed): what each opaque handle of
// tensorizer.h holds, and how a C entry point reports an error (status + thread-local message).
#pragma once

#include "tensorizer.h"

#include "tensorizer/tensorizer.hpp"
#include "tz/base/error.hpp"

#include <exception>
#include <new>
#include <string>
#include <vector>

struct tz_options {
  tensorizer::options o;
};
struct tz_model {
  tensorizer::model m;
};
struct tz_host_tensors {
  tensorizer::host_tensors t;
};
struct tz_device_tensors {
  tensorizer::device_tensors t;
};

namespace tz_c {

// Records e's message for tz_last_error_message() on this thread and returns its status.
tz_status fail(const tensorizer::error& e) noexcept;
tz_status fail(tensorizer::errc code, const char* message) noexcept;
const char* last_message() noexcept;

// Writes a load's timings to *out when out is not NULL.
inline void put_timings(const tensorizer::load_timings& t, tz_timings* out) noexcept {
  if (out) *out = tz_timings{t.open_s, t.prepare_s, t.transfer_s, t.total_s, t.read_s, t.verify_s, t.decrypt_s, t.upload_s, t.wait_s};
}

// Runs one C entry point's body; an exception becomes TZ_ERR_INTERNAL naming the function.
template <class F>
tz_status guarded(const char* where, F&& body) noexcept {
  try {
    return body();
  } catch (...) {
    try {
      return fail(tensorizer::error{tensorizer::errc::internal, std::string(where) + ": " + tz::describe_exception(std::current_exception())});
    } catch (...) {
      return fail(tensorizer::errc::internal, where);
    }
  }
}

}  // namespace tz_c

// Fails the entry point with TZ_ERR_INVALID_ARGUMENT when a required pointer is NULL.
#define TZ_C_REQUIRE(cond, where)                                                                          \
  do {                                                                                                     \
    if (!(cond)) return tz_c::fail(tensorizer::errc::invalid_argument, where ": a required argument is NULL"); \
  } while (0)

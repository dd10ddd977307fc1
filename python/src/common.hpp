// Shared pieces of the tensorizer._C extension: the process scheduler, error translation, options.
#pragma once

#include "tz/base/error.hpp"
#include "tz/cuda/cuda.hpp"
#include "tz/cuda/dlpack.hpp"
#include "tz/engine/loader.hpp"
#include "tz/engine/scheduler.hpp"
#include "tz/sources/sources.hpp"

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

namespace tz::py {

namespace pyb = pybind11;

// Every live Source, Reader, Loaded and Writer shares the engine's tz::shared_scheduler().

// Raised by raise_error: the Python exception registered for e.code (set_error_types), else
// RuntimeError, carrying e.message.
[[noreturn]] void raise_error(const error& e);

// Unwraps a result, raising its error as a Python exception.
template <class T>
T take(result<T> r) {
  if (!r) raise_error(r.error());
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

// Remote options from the keyword arguments of API.md (ca_file, insecure, connections, s3_*).
tz::remote_options remote_options_from(const pyb::kwargs& kw);

// _C.Block: a writable 1-D byte view of one host tensor; keeps the memory it lies in alive.
struct block {
  std::shared_ptr<const void> owner;
  std::byte* data = nullptr;
  std::size_t size_bytes = 0;
};
inline std::shared_ptr<block> make_block(std::shared_ptr<const void> owner, std::byte* data, std::size_t size_bytes) {
  return std::make_shared<block>(block{std::move(owner), data, size_bytes});
}

// A "dltensor" capsule owning t until a consumer renames it "used_dltensor"; an unused capsule
// runs the tensor's deleter itself.
pyb::capsule dltensor_capsule(cuda::managed_tensor_ptr t);

// A load's timings as a dict, the same keys for host and device loads (see tz::load_timings).
pyb::dict timings_dict(const load_timings& t);

void register_keys(pyb::module_& m);
void register_source(pyb::module_& m);
void register_reader(pyb::module_& m);
void register_writer(pyb::module_& m);
void register_stream(pyb::module_& m);

}  // namespace tz::py

// Shared pieces of the tensorizer._C extension: the process scheduler, error translation, options.
#pragma once

#include "tz/base/error.hpp"
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

void register_keys(pyb::module_& m);
void register_source(pyb::module_& m);
void register_reader(pyb::module_& m);
void register_writer(pyb::module_& m);

}  // namespace tz::py

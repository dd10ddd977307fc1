// Errors as values: the one error type of the project and the result<T> that carries it.
// It lives in tz::base (base/), the leaf library that every other module links.
#pragma once

#include <boost/system/result.hpp>

#include <stdexcept>
#include <type_traits>
#include <exception>
#include <string>
#include <utility>

namespace tz {

// What kind of failure an error is; the message says which source, tensor, offset and values.
enum class errc : int {
  io = 1,            // the OS or a source failed to read or write
  format,            // the bytes are not a valid .tensors / safetensors file
  hash_mismatch,     // a stored CRC32 / SHA-256 does not match the data
  crypto,            // missing / wrong key, MAC failure, encrypted-ness mismatch
  not_found,         // a named tensor, file, object or key does not exist
  invalid_argument,  // the caller asked for something impossible
  network,           // a remote source failed after its retry budget
  auth,              // credentials were rejected
  timeout,           // a deadline passed
  cuda,              // a CUDA runtime call failed
  no_device,         // no usable GPU
  unsupported,       // a valid input this build cannot handle
  cancelled,         // the operation was cancelled
};

// Short lower-case name of an error kind, e.g. "hash_mismatch".
const char* errc_name(errc code) noexcept;

// A failure on the data path: its kind plus a complete, human-readable message.
struct error {
  errc code = errc::io;
  std::string message;
};

inline error make_error(errc code, std::string message) { return error{code, std::move(message)}; }

// The exception thrown at the API edge (result::value() on an error, the throwing wrappers).
class exception : public std::runtime_error {
 public:
  explicit exception(error e) : std::runtime_error(e.message), code_(e.code) {}
  errc code() const noexcept { return code_; }

 private:
  errc code_;
};

// What an exception that escaped (bad_alloc, a thread that cannot start, a broken invariant) says:
// "out of memory", its what(), or "an unknown exception". The one translation every boundary uses
// (the readers of the pipeline, the C++ facade, the C ABI, the Python module), each then reporting
// it in its own form, naming where it happened.
std::string describe_exception(std::exception_ptr e) noexcept;

// Found by ADL from boost::system::result<T, error>::value().
[[noreturn]] void throw_exception_from_error(const error& e, const boost::source_location& loc);

template <class T>
using result = boost::system::result<T, error>;

// Unwraps a result at the API edge: the value, or tz::exception.
template <class T>
T unwrap(result<T>&& r) {
  if (!r) throw exception(r.error());
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

}  // namespace tz

// Propagates an error out of a function returning tz::result<...>.
#define TZ_TRY(var, expr)                                   \
  auto var##_result_ = (expr);                              \
  if (!var##_result_) return std::move(var##_result_).error(); \
  auto var = std::move(*var##_result_)

#define TZ_CHECK(expr)                        \
  do {                                        \
    auto tz_check_result_ = (expr);           \
    if (!tz_check_result_) return tz_check_result_.error(); \
  } while (0)

// The same two forms for coroutines returning task<tz::result<...>> (co_return instead of return).
// `expr` may itself be a co_await expression: TZ_CO_TRY(size, co_await source.size()).
#define TZ_CO_TRY(var, expr)                                      \
  auto var##_result_ = (expr);                                    \
  if (!var##_result_) co_return std::move(var##_result_).error(); \
  auto var = std::move(*var##_result_)

#define TZ_CO_CHECK(expr)                                      \
  do {                                                         \
    auto tz_check_result_ = (expr);                            \
    if (!tz_check_result_) co_return tz_check_result_.error(); \
  } while (0)

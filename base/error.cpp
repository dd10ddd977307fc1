// The project-wide error type (tz::base, the leaf library every other module links).
#include "tz/base/error.hpp"

#include <new>

namespace tz {

const char* errc_name(errc code) noexcept {
  switch (code) {
    case errc::io: return "io";
    case errc::format: return "format";
    case errc::hash_mismatch: return "hash_mismatch";
    case errc::crypto: return "crypto";
    case errc::not_found: return "not_found";
    case errc::invalid_argument: return "invalid_argument";
    case errc::network: return "network";
    case errc::auth: return "auth";
    case errc::timeout: return "timeout";
    case errc::cuda: return "cuda";
    case errc::no_device: return "no_device";
    case errc::unsupported: return "unsupported";
    case errc::cancelled: return "cancelled";
  }
  return "unknown";
}

std::string describe_exception(std::exception_ptr e) noexcept {
  try {
    try {
      std::rethrow_exception(std::move(e));
    } catch (const std::bad_alloc&) {
      return "out of memory";
    } catch (const std::exception& x) {
      return x.what();
    } catch (...) {
      return "an unknown exception";
    }
  } catch (...) {  // a string that cannot be made: nothing better to say
    return {};
  }
}

void throw_exception_from_error(const error& e, const boost::source_location&) { throw exception(e); }

}  // namespace tz

// The one "read a range completely" loop shared by sources: resubmit short reads, retry EINTR/EAGAIN.
#pragma once

#include "tz/base/byte_source.hpp"
#include "tz/base/error.hpp"
#include "tz/base/task.hpp"

#include <boost/system/error_code.hpp>

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

namespace tz {

// What one attempt of a read_some primitive returned: bytes (possibly fewer than asked) or an error.
struct read_some_result {
  boost::system::error_code error;
  std::size_t bytes = 0;
};

// Consecutive transient failures (EAGAIN) tolerated without progress before giving up.
inline constexpr unsigned transient_retry_max = 100;
// Longest iovec list passed to one attempt (IOV_MAX is 1024 on Linux).
inline constexpr std::size_t read_iov_max = 1024;

// Reads all of dst from offset_bytes by calling read_some(offset, iovecs) until every byte has
// arrived. Short reads are resubmitted for the remainder; EINTR is retried at once and EAGAIN up to
// transient_retry_max times in a row; 0 bytes before the end is an EOF error. Errors name
// `source_name` and the offset at which the failing attempt started. ReadSome is a callable
// returning task<read_some_result>; it is called with (std::uint64_t, std::span<const iovec>).
template <class ReadSome>
task<result<void>> read_fully(std::string_view source_name, std::uint64_t offset_bytes,
                              scatter_list dst, ReadSome read_some) {
  std::vector<iovec> iov;
  iov.reserve(dst.size());
  std::uint64_t end_offset = offset_bytes;
  for (auto s : dst) {
    if (!s.empty()) iov.push_back({s.data(), s.size()});
    end_offset += s.size();
  }
  std::size_t first = 0;
  unsigned transient_count = 0;
  std::uint64_t pos = offset_bytes;
  while (first < iov.size()) {
    std::size_t count = std::min(iov.size() - first, read_iov_max);
    read_some_result r = co_await read_some(pos, std::span<const iovec>(iov.data() + first, count));
    if (r.error == boost::system::errc::interrupted) continue;
    if (r.error == boost::system::errc::resource_unavailable_try_again) {
      if (++transient_count <= transient_retry_max) continue;
    }
    if (r.error) {
      co_return make_error(errc::io, std::string(source_name) + ": read failed at offset " + std::to_string(pos) +
                                         ": " + r.error.message());
    }
    if (r.bytes == 0) {
      co_return make_error(errc::io, std::string(source_name) + ": unexpected end of data at offset " +
                                         std::to_string(pos) + " (the read needs bytes up to offset " +
                                         std::to_string(end_offset) + ")");
    }
    transient_count = 0;
    pos += r.bytes;
    // Drop the iovecs that are complete; trim the one the read stopped inside.
    std::size_t n = r.bytes;
    while (first < iov.size() && n >= iov[first].iov_len) n -= iov[first++].iov_len;
    if (n > 0) {
      iov[first].iov_base = static_cast<std::byte*>(iov[first].iov_base) + n;
      iov[first].iov_len -= n;
    }
  }
  co_return result<void>{};
}

}  // namespace tz

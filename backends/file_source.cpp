// io_uring file source: spans split into buffered edges and O_DIRECT middles, read by read_fully().
#include "tz/backends/file_source.hpp"
#include "tz/base/posix_io.hpp"

#include "tz/backends/read_loop.hpp"
#include "tz/backends/uring_service.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/this_coro.hpp>

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

namespace tz {

namespace {

constexpr std::uint64_t direct_align_bytes = 4096;
// Below this an O_DIRECT read saves nothing worth a second request.
constexpr std::uint64_t direct_min_bytes = 256 * 1024;

// A run of consecutive bytes read through one descriptor.
struct segment {
  bool direct = false;
  std::uint64_t offset_bytes = 0;
  std::vector<std::span<std::byte>> spans;
};

void append(std::vector<segment>& out, bool direct, std::uint64_t offset, std::span<std::byte> s) {
  if (s.empty()) return;
  // Buffered pieces that follow each other share one readv; each direct piece is its own read.
  if (!direct && !out.empty() && !out.back().direct) {
    out.back().spans.push_back(s);
    return;
  }
  out.push_back({direct, offset, {s}});
}

// Splits dst (starting at file offset `offset`) into buffered edges and aligned O_DIRECT middles.
std::vector<segment> split_for_direct(std::uint64_t offset, scatter_list dst) {
  std::vector<segment> out;
  for (auto s : dst) {
    auto addr = reinterpret_cast<std::uintptr_t>(s.data());
    bool same_phase = addr % direct_align_bytes == offset % direct_align_bytes;
    std::uint64_t mid_begin = (offset + direct_align_bytes - 1) / direct_align_bytes * direct_align_bytes;
    std::uint64_t mid_end = (offset + s.size()) / direct_align_bytes * direct_align_bytes;
    if (!same_phase || mid_end <= mid_begin || mid_end - mid_begin < direct_min_bytes) {
      append(out, false, offset, s);
    } else {
      std::size_t head = mid_begin - offset, middle = mid_end - mid_begin;
      append(out, false, offset, s.first(head));
      append(out, true, mid_begin, s.subspan(head, middle));
      append(out, false, mid_end, s.subspan(head + middle));
    }
    offset += s.size();
  }
  return out;
}

}  // namespace

result<std::shared_ptr<file_source>> file_source::open(const std::string& path, file_options options) {
  TZ_TRY(fd, open_read_only(path));
  TZ_TRY(size_bytes, file_size(fd.get(), "file " + path));
  unique_fd direct_fd;
  if (options.direct) {
    // Some filesystems (tmpfs) refuse O_DIRECT: then every read stays buffered.
    direct_fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
  }
  return std::shared_ptr<file_source>(new file_source(path, std::move(fd), std::move(direct_fd), size_bytes, options));
}

file_source::file_source(std::string path, unique_fd fd, unique_fd direct_fd, std::uint64_t size_bytes,
                         file_options options)
    : path_(std::move(path)), name_("file " + path_), fd_(std::move(fd)), direct_fd_(std::move(direct_fd)),
      size_bytes_(size_bytes), options_(options) {}

file_source::~file_source() = default;

task<result<std::uint64_t>> file_source::size() { co_return size_bytes_; }

result<void> file_source::drop_cache() const {
  int rc = ::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_DONTNEED);
  if (rc != 0) return os_error(rc, name_ + ": posix_fadvise(DONTNEED)");
  return {};
}

task<result<void>> file_source::read(std::uint64_t offset_bytes, scatter_list dst) {
  if (!direct_fd_) co_return co_await read_with(fd_.get(), offset_bytes, dst);
  for (const segment& seg : split_for_direct(offset_bytes, dst)) {
    auto r = co_await read_with(seg.direct ? direct_fd_.get() : fd_.get(), seg.offset_bytes, seg.spans);
    if (!r) co_return r;
  }
  co_return result<void>{};
}

task<result<void>> file_source::read_with(int fd, std::uint64_t offset_bytes, scatter_list dst) {
  uring_service* ring = nullptr;
  try {
    ring = &uring_service::of(co_await boost::asio::this_coro::executor);
  } catch (const std::system_error&) {
    ring = nullptr;  // io_uring disabled here: plain preadv on this thread
  }
  unsigned flags = options_.async_punt ? IOSQE_ASYNC : 0;
  auto read_some = [ring, fd, flags](std::uint64_t off, std::span<const iovec> iov) -> task<read_some_result> {
    if (ring == nullptr) {
      ssize_t n = ::preadv(fd, iov.data(), static_cast<int>(iov.size()), static_cast<off_t>(off));
      if (n < 0) co_return read_some_result{{errno, boost::system::system_category()}, 0};
      co_return read_some_result{{}, static_cast<std::size_t>(n)};
    }
    auto [ec, n] = co_await ring->async_readv(fd, iov.data(), static_cast<unsigned>(iov.size()), off, flags,
                                              boost::asio::as_tuple(use_task));
    co_return read_some_result{ec, n};
  };
  co_return co_await read_fully(name_, offset_bytes, dst, read_some);
}

}  // namespace tz

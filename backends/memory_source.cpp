// The fault-injecting in-memory source: each attempt consults the planted faults, then copies.
#include "tz/backends/memory_source.hpp"

#include "tz/backends/read_loop.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tz {

memory_source::memory_source(std::vector<std::byte> data, std::string name)
    : data_(std::move(data)), name_(std::move(name)) {}

void memory_source::inject(injected_fault fault) {
  std::lock_guard lock(mutex_);
  faults_.push_back(fault);
}

task<result<std::uint64_t>> memory_source::size() { co_return data_.size(); }

memory_source::attempt_outcome memory_source::plan_attempt(std::uint64_t offset, std::size_t want) {
  std::lock_guard lock(mutex_);
  attempt_outcome out{0, want};
  for (auto& f : faults_) {
    bool hits = f.offset_bytes >= offset && f.offset_bytes < offset + want;
    bool live = f.times > 0 || f.what == injected_fault::kind::hard;
    if (!hits || !live) continue;
    if (f.times > 0) --f.times;
    switch (f.what) {
      case injected_fault::kind::short_read:
        out.limit_bytes = std::min<std::size_t>(out.limit_bytes, std::max<std::uint64_t>(1, f.offset_bytes - offset));
        break;
      case injected_fault::kind::interrupted: return {EINTR, 0};
      case injected_fault::kind::again: return {EAGAIN, 0};
      case injected_fault::kind::hard: return {EIO, 0};
    }
  }
  return out;
}

task<result<void>> memory_source::read(std::uint64_t offset_bytes, scatter_list dst) {
  reads_.fetch_add(1, std::memory_order_relaxed);
  auto read_some = [this](std::uint64_t off, std::span<const iovec> iov) -> task<read_some_result> {
    co_await boost::asio::post(co_await boost::asio::this_coro::executor, use_task);
    attempts_.fetch_add(1, std::memory_order_relaxed);
    std::size_t want = 0;
    for (const iovec& v : iov) want += v.iov_len;
    want = std::min(want, attempt_max_bytes_.load(std::memory_order_relaxed));
    if (off >= data_.size()) co_return read_some_result{{}, 0};
    want = std::min<std::uint64_t>(want, data_.size() - off);
    attempt_outcome plan = plan_attempt(off, want);
    if (plan.error != 0) co_return read_some_result{{plan.error, boost::system::system_category()}, 0};
    std::size_t done = 0;
    for (const iovec& v : iov) {
      if (done == plan.limit_bytes) break;
      std::size_t n = std::min(v.iov_len, plan.limit_bytes - done);
      std::memcpy(v.iov_base, data_.data() + off + done, n);
      done += n;
    }
    co_return read_some_result{{}, done};
  };
  co_return co_await read_fully(name_, offset_bytes, dst, read_some);
}

}  // namespace tz

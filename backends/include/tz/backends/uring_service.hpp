// One io_uring ring per io_context: file reads that complete on the thread running that context.
#pragma once

#include "tz/base/task.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/system/error_code.hpp>

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

struct io_uring;

namespace tz {

// An Asio service owning one io_uring ring per io_context. Its completion eventfd is awaited by the
// context's own reactor, so io_uring file reads and Asio socket work share one event loop per
// thread. Must be used only from the single thread that runs its io_context (every scheduler
// worker and every sync_wait context is such a thread). See engine/DESIGN.md for the measurements
// behind this choice (raw liburing per thread vs Asio's random_access_file vs IOSQE_ASYNC).
class uring_service : public boost::asio::io_context::service {
 public:
  static boost::asio::io_context::id id;
  // Submission queue entries; also the bound on reads in flight per thread (more wait in a queue).
  static constexpr unsigned queue_depth = 64;

  explicit uring_service(boost::asio::io_context& ctx);
  ~uring_service() override;

  // The ring of the io_context behind `ex` (created on first use). Fails with std::system_error
  // if io_uring is unavailable (e.g. disabled by sysctl or seccomp).
  static uring_service& of(const boost::asio::any_io_executor& ex);

  // A submitted operation; complete() receives the CQE result (bytes, or -errno) exactly once.
  struct op {
    virtual ~op() = default;
    virtual void complete(int res) = 0;
    int fd = -1;
    const iovec* iov = nullptr;
    unsigned iov_count = 0;
    std::uint64_t offset_bytes = 0;
    unsigned sqe_flags = 0;
  };

  // Reads into iov[0..iov_count) from fd at offset_bytes (preadv semantics: may be short).
  // Completes with (error, bytes read) on the caller's executor. `iov` must stay valid until
  // completion. sqe_flags may hold IOSQE_ASYNC to punt the read to the kernel's worker pool.
  template <class Token>
  auto async_readv(int fd, const iovec* iov, unsigned iov_count, std::uint64_t offset_bytes,
                   unsigned sqe_flags, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this, fd, iov, iov_count, offset_bytes, sqe_flags](auto handler) {
          auto o = std::make_unique<handler_op<decltype(handler)>>(std::move(handler), executor_);
          o->fd = fd;
          o->iov = iov;
          o->iov_count = iov_count;
          o->offset_bytes = offset_bytes;
          o->sqe_flags = sqe_flags;
          start(std::move(o));
        },
        token);
  }

  std::size_t inflight() const noexcept { return inflight_; }

 private:
  template <class Handler>
  struct handler_op final : op {
    handler_op(Handler h, boost::asio::any_io_executor fallback)
        : handler(std::move(h)), fallback_executor(std::move(fallback)) {}
    void complete(int res) override {
      boost::system::error_code ec;
      std::size_t n = 0;
      if (res < 0) ec.assign(-res, boost::system::system_category());
      else n = static_cast<std::size_t>(res);
      auto ex = boost::asio::get_associated_executor(handler, fallback_executor);
      boost::asio::dispatch(ex, [h = std::move(handler), ec, n]() mutable { std::move(h)(ec, n); });
    }
    Handler handler;
    boost::asio::any_io_executor fallback_executor;
  };

  void shutdown() override;
  void start(std::unique_ptr<op> o);
  void submit_pending();
  void arm_wait();
  void reap();

  std::unique_ptr<::io_uring> ring_;
  boost::asio::any_io_executor executor_;
  boost::asio::posix::stream_descriptor event_;
  std::deque<std::unique_ptr<op>> pending_;  // waiting for a free queue slot
  std::size_t inflight_ = 0;
  bool waiting_ = false;
};

}  // namespace tz

// The per-io_context io_uring ring: submit, reap on the eventfd, resume the waiting handlers.
#include "tz/backends/uring_service.hpp"
#include "tz/base/unique_fd.hpp"

#include <boost/asio/strand.hpp>
#include <boost/asio/post.hpp>

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cassert>
#include <system_error>

namespace tz {

boost::asio::io_context::id uring_service::id;

namespace {
[[noreturn]] void throw_errno(int err, const char* what) {
  throw std::system_error(err, std::generic_category(), what);
}
}  // namespace

uring_service::uring_service(boost::asio::io_context& ctx)
    : boost::asio::io_context::service(ctx),
      ring_(std::make_unique<::io_uring>()),
      executor_(ctx.get_executor()),
      event_(ctx) {
  int rc = io_uring_queue_init(queue_depth, ring_.get(), 0);
  if (rc < 0) throw_errno(-rc, "io_uring_queue_init");
  unique_fd efd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!efd) {
    int err = errno;
    io_uring_queue_exit(ring_.get());
    throw_errno(err, "eventfd");
  }
  rc = io_uring_register_eventfd(ring_.get(), efd.get());
  if (rc < 0) {
    io_uring_queue_exit(ring_.get());
    throw_errno(-rc, "io_uring_register_eventfd");
  }
  event_.assign(efd.release());  // the stream descriptor owns it from here
}

uring_service::~uring_service() {
  if (ring_) io_uring_queue_exit(ring_.get());
}

uring_service& uring_service::of(const boost::asio::any_io_executor& ex) {
  using io_executor = boost::asio::io_context::executor_type;
  if (const auto* io = ex.target<io_executor>()) return boost::asio::use_service<uring_service>(io->context());
  if (const auto* s = ex.target<boost::asio::strand<io_executor>>()) {
    return boost::asio::use_service<uring_service>(s->get_inner_executor().context());
  }
  throw std::logic_error("tz::uring_service needs an io_context executor (or a strand of one)");
}

void uring_service::shutdown() {
  // The kernel may still be writing into buffers owned by the abandoned operations: wait for every
  // in-flight read to finish before their handlers (and the frames owning the buffers) go away.
  pending_.clear();
  while (inflight_ > 0) {
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(ring_.get(), &cqe) < 0) break;
    std::unique_ptr<op> done(static_cast<op*>(io_uring_cqe_get_data(cqe)));
    io_uring_cqe_seen(ring_.get(), cqe);
    --inflight_;
  }
  boost::system::error_code ignored;
  event_.close(ignored);
}

void uring_service::start(std::unique_ptr<op> o) {
  pending_.push_back(std::move(o));
  submit_pending();
  arm_wait();
}

void uring_service::submit_pending() {
  // In-flight reads are bounded by queue_depth so the completion queue can never overflow.
  while (!pending_.empty() && inflight_ < queue_depth) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
    if (sqe == nullptr) break;
    op* o = pending_.front().release();
    pending_.pop_front();
    io_uring_prep_readv(sqe, o->fd, o->iov, o->iov_count, o->offset_bytes);
    io_uring_sqe_set_flags(sqe, o->sqe_flags);
    io_uring_sqe_set_data(sqe, o);
    ++inflight_;
  }
  if (io_uring_sq_ready(ring_.get()) == 0) return;
  int rc = 0;
  do {
    rc = io_uring_submit(ring_.get());
  } while (rc == -EINTR);
  // Reads from page cache usually complete inside this call: the memcpy runs right here, on this
  // thread. A failed submit (EAGAIN/EBUSY: the kernel is short of resources) leaves the SQEs in
  // the ring; retry from the event loop so they are not stranded when no new read arrives.
  if (rc < 0) boost::asio::post(executor_, [this] { submit_pending(); });
}

void uring_service::arm_wait() {
  if (waiting_ || inflight_ == 0) return;
  waiting_ = true;
  event_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                    [this](const boost::system::error_code& ec) {
                      waiting_ = false;
                      if (ec) return;  // closed at shutdown
                      std::uint64_t count = 0;
                      [[maybe_unused]] auto n = ::read(event_.native_handle(), &count, sizeof count);
                      reap();
                      submit_pending();
                      arm_wait();
                    });
}

void uring_service::reap() {
  // Collect first, then complete: a completion may start new reads that touch the ring.
  io_uring_cqe* cqe = nullptr;
  op* batch[queue_depth];
  int results[queue_depth];
  unsigned count = 0;
  while (count < queue_depth && io_uring_peek_cqe(ring_.get(), &cqe) == 0 && cqe != nullptr) {
    batch[count] = static_cast<op*>(io_uring_cqe_get_data(cqe));
    results[count] = cqe->res;
    ++count;
    io_uring_cqe_seen(ring_.get(), cqe);
  }
  inflight_ -= count;
  for (unsigned i = 0; i < count; ++i) {
    std::unique_ptr<op> done(batch[i]);
    done->complete(results[i]);
  }
}

}  // namespace tz

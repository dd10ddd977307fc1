// The lease ring: slot bookkeeping under one mutex, FIFO waiters resumed on their own executors.
#include "tz/engine/lease_ring.hpp"

#include "tz/engine/host_memory.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

#include <sys/mman.h>

#include <cassert>
#include <new>

namespace tz {

namespace asio = boost::asio;
using boost::system::error_code;

std::byte* page_allocator::allocate(std::size_t size_bytes) {
  void* p = ::mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto* bytes = static_cast<std::byte*>(p);
  prefault({bytes, size_bytes});
  return bytes;
}

void page_allocator::deallocate(std::byte* p, std::size_t size_bytes) noexcept { ::munmap(p, size_bytes); }

lease::lease(lease&& other) noexcept
    : ring_(std::exchange(other.ring_, nullptr)), slot_(other.slot_), bytes_(other.bytes_) {}

lease& lease::operator=(lease&& other) noexcept {
  if (this != &other) {
    reset();
    ring_ = std::exchange(other.ring_, nullptr);
    slot_ = other.slot_;
    bytes_ = other.bytes_;
  }
  return *this;
}

void lease::reset() noexcept {
  if (ring_ != nullptr) std::exchange(ring_, nullptr)->release(slot_);
  bytes_ = {};
}

// A suspended acquire(). complete() is called once, under no lock, by release() or by cancellation.
struct lease_ring::waiter {
  virtual ~waiter() = default;
  virtual void complete(error_code ec, lease l) = 0;
};

lease_ring::lease_ring(std::size_t slot_count, std::size_t slot_bytes,
                       std::shared_ptr<buffer_allocator> allocator)
    : slot_count_(slot_count),
      slot_bytes_((slot_bytes + page_bytes - 1) / page_bytes * page_bytes),
      allocator_(std::move(allocator)) {
  assert(slot_count_ > 0 && slot_bytes_ > 0);
  memory_ = allocator_->allocate(slot_count_ * slot_bytes_);
  free_.reserve(slot_count_);
  if (!allocator_->readies_slots()) {
    for (std::size_t i = slot_count_; i-- > 0;) free_.push_back(i);
    return;
  }
  try {
    allocator_->ready_slot({memory_, slot_bytes_});
  } catch (...) {
    allocator_->deallocate(memory_, slot_count_ * slot_bytes_);
    throw;
  }
  free_.push_back(0);
  if (slot_count_ > 1) readier_ = std::thread([this] { ready_the_rest(); });
}

// Slots 1.. in order, each handed out (to a waiter, if any) as soon as it is ready. When the ring
// goes away first, the rest are returned unreadied, so the count of free slots stays whole.
void lease_ring::ready_the_rest() noexcept {
  for (std::size_t i = 1; i < slot_count_; ++i) {
    if (!stopping_.load(std::memory_order_relaxed)) {
      try {
        allocator_->ready_slot({memory_ + i * slot_bytes_, slot_bytes_});
      } catch (...) {
        // Handed out as it is (see buffer_allocator::ready_slot).
      }
    }
    release(i, false);
  }
}

lease_ring::~lease_ring() {
  stopping_.store(true, std::memory_order_relaxed);
  if (readier_.joinable()) readier_.join();
  assert(free_.size() == slot_count_ && "a lease outlived its ring");
  assert(waiters_.empty() && "an acquire() is still waiting");
  allocator_->deallocate(memory_, slot_count_ * slot_bytes_);
}

std::size_t lease_ring::available() const {
  std::lock_guard lock(mutex_);
  return free_.size();
}

std::size_t lease_ring::leased() const {
  std::lock_guard lock(mutex_);
  return leased_;
}

lease lease_ring::try_acquire() {
  std::lock_guard lock(mutex_);
  if (free_.empty()) return {};
  std::size_t slot = free_.back();
  free_.pop_back();
  ++leased_;
  return lease(this, slot, {memory_ + slot * slot_bytes_, slot_bytes_});
}

void lease_ring::release(std::size_t slot, bool returned) noexcept {
  std::shared_ptr<waiter> next;
  {
    std::lock_guard lock(mutex_);
    if (returned) --leased_;
    if (waiters_.empty()) {
      free_.push_back(slot);
      return;
    }
    next = std::move(waiters_.front());
    waiters_.pop_front();
    ++leased_;
  }
  // Hand the slot straight to the oldest waiter, so a stream of try_acquire() calls cannot starve it.
  next->complete({}, lease(this, slot, {memory_ + slot * slot_bytes_, slot_bytes_}));
}

std::shared_ptr<lease_ring::waiter> lease_ring::cancel(const waiter* w) noexcept {
  std::lock_guard lock(mutex_);
  for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
    if (it->get() == w) {
      auto found = std::move(*it);
      waiters_.erase(it);
      return found;
    }
  }
  return nullptr;  // already completed by release()
}

void lease_ring::enqueue(std::shared_ptr<waiter> w) {
  std::size_t slot = 0;
  {
    std::lock_guard lock(mutex_);
    // A slot may have been returned between the caller's failed try_acquire() and now.
    if (free_.empty()) {
      waiters_.push_back(std::move(w));
      return;
    }
    slot = free_.back();
    free_.pop_back();
    ++leased_;
  }
  w->complete({}, lease(this, slot, {memory_ + slot * slot_bytes_, slot_bytes_}));
}

task<result<lease>> lease_ring::acquire() {
  if (lease l = try_acquire()) co_return l;
  auto initiation = [this](auto handler) {
    using handler_type = decltype(handler);
    // Completion always goes through post() to the waiter's executor: release() may run on any
    // thread, and the cancellation slot may only be touched on the waiter's own thread.
    struct impl final : waiter {
      explicit impl(handler_type h)
          : handler(std::move(h)), slot(asio::get_associated_cancellation_slot(handler)) {}
      void complete(error_code ec, lease l) override {
        auto ex = asio::get_associated_executor(handler);
        asio::post(ex, [h = std::move(handler), s = slot, ec, l = std::move(l)]() mutable {
          if (s.is_connected()) s.clear();
          std::move(h)(ec, std::move(l));
        });
      }
      handler_type handler;
      asio::cancellation_slot slot;
    };
    auto w = std::make_shared<impl>(std::move(handler));
    if (w->slot.is_connected()) {
      w->slot.assign([this, raw = w.get()](asio::cancellation_type) {
        if (auto found = cancel(raw)) found->complete(asio::error::operation_aborted, {});
      });
    }
    enqueue(std::move(w));
  };
  auto token = asio::as_tuple(use_task);
  auto [ec, l] = co_await asio::async_initiate<decltype(token), void(error_code, lease)>(std::move(initiation), token);
  if (ec) co_return make_error(errc::cancelled, "lease_ring: acquire() cancelled while waiting for a free slot");
  co_return std::move(l);
}

}  // namespace tz

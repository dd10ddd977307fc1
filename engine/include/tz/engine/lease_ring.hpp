// A fixed ring of equal buffers handed out as move-only leases; acquiring suspends when all are out.
#pragma once

#include "tz/base/error.hpp"
#include "tz/base/task.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace tz {

// Where the ring's memory comes from. The default gives page-aligned anonymous memory; the CUDA
// stage gives pinned host memory. allocate() may throw at setup (std::bad_alloc, tz::exception).
class buffer_allocator {
 public:
  virtual ~buffer_allocator() = default;
  virtual std::byte* allocate(std::size_t size_bytes) = 0;
  virtual void deallocate(std::byte* p, std::size_t size_bytes) noexcept = 0;
  // An allocator whose slots need work before first use (pinning: fault in, cudaHostRegister)
  // says so here and does it in ready_slot(); the ring then readies slot 0 in its constructor and
  // the rest on a thread of its own, handing each out once ready, so that a new ring is usable
  // after one slot's setup instead of all of them. ready_slot() may throw: for slot 0 the ring's
  // constructor fails; a later slot is handed out as it is, which must still be correct (an
  // unpinned slot copies at pageable speed).
  virtual bool readies_slots() const noexcept { return false; }
  virtual void ready_slot(std::span<std::byte> /*slot*/) {}
};

// Page-aligned, pre-faulted anonymous memory (mmap + MADV_POPULATE_WRITE).
class page_allocator final : public buffer_allocator {
 public:
  std::byte* allocate(std::size_t size_bytes) override;
  void deallocate(std::byte* p, std::size_t size_bytes) noexcept override;
};

class lease_ring;

// Ownership of one slot of a lease_ring. Whoever holds the lease owns the bytes; destroying (or
// reset()ting) it returns the slot and resumes the oldest waiter, on that waiter's executor.
// Leases may be released from any thread. The ring must outlive every lease.
class lease {
 public:
  lease() = default;
  lease(lease&& other) noexcept;
  lease& operator=(lease&& other) noexcept;
  lease(const lease&) = delete;
  lease& operator=(const lease&) = delete;
  ~lease() { reset(); }

  explicit operator bool() const noexcept { return ring_ != nullptr; }
  std::span<std::byte> bytes() const noexcept { return bytes_; }
  std::size_t slot() const noexcept { return slot_; }
  void reset() noexcept;

 private:
  friend class lease_ring;
  lease(lease_ring* ring, std::size_t slot, std::span<std::byte> bytes) noexcept
      : ring_(ring), slot_(slot), bytes_(bytes) {}
  lease_ring* ring_ = nullptr;
  std::size_t slot_ = 0;
  std::span<std::byte> bytes_;
};

// slot_count buffers of slot_bytes each (rounded up to whole pages), allocated once at
// construction (readied slot by slot when the allocator asks for it, see buffer_allocator).
// Bounded: at most slot_count leases exist; acquire() is the back-pressure.
class lease_ring {
 public:
  lease_ring(std::size_t slot_count, std::size_t slot_bytes,
             std::shared_ptr<buffer_allocator> allocator = std::make_shared<page_allocator>());
  // Stops readying slots, then asserts (debug) that every lease has been returned and no
  // acquire() is waiting.
  ~lease_ring();
  lease_ring(const lease_ring&) = delete;
  lease_ring& operator=(const lease_ring&) = delete;

  std::size_t slot_count() const noexcept { return slot_count_; }
  std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  std::size_t available() const;
  // Leases out now. Not slot_count() - available(): slots still being readied are neither.
  std::size_t leased() const;

  // A free slot, or an empty lease when all are out. Never waits.
  lease try_acquire();

  // Completes with a lease as soon as a slot is free (immediately when one is). The waiter is
  // resumed on its own executor, in FIFO order. Fails with errc::cancelled when the awaiting
  // operation is cancelled (per-operation cancellation, e.g. a timer race with `||`).
  task<result<lease>> acquire();

 private:
  friend class lease;
  struct waiter;
  // `returned`: a lease gave the slot back (false: the readier hands out a newly readied one).
  void release(std::size_t slot, bool returned = true) noexcept;
  void ready_the_rest() noexcept;
  void enqueue(std::shared_ptr<waiter> w);
  std::shared_ptr<waiter> cancel(const waiter* w) noexcept;

  std::size_t slot_count_;
  std::size_t slot_bytes_;
  std::shared_ptr<buffer_allocator> allocator_;
  std::byte* memory_ = nullptr;
  mutable std::mutex mutex_;
  std::vector<std::size_t> free_;                 // slot indices, used as a stack
  std::deque<std::shared_ptr<waiter>> waiters_;   // FIFO
  std::size_t leased_ = 0;                        // leases out
  std::atomic<bool> stopping_{false};
  std::thread readier_;  // readies slots 1.. when the allocator readies slots
};

}  // namespace tz

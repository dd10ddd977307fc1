// What device loads onto one GPU share for the life of a process: the uploader (its streams and
// their completion threads) and the pinned staging rings. Made once and reused by every load on
// that device, so a load pays for none of it; several loads may run on one context at once.
#pragma once

#include "tz/base/error.hpp"
#include "tz/cuda/cuda.hpp"
#include "tz/engine/lease_ring.hpp"

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace tz {

class device_context;

// A ring of `slot_count` pinned slots able to hold reads of `slot_bytes` (each slot is one page
// larger, so that a read lands at its file offset modulo 4 KiB and O_DIRECT applies). Fails with
// errc::no_device without a GPU, errc::cuda when the memory cannot be pinned,
// errc::invalid_argument for an empty or absurdly large ring. Pinned with `device` current (on
// every thread that pins a slot; -1: whichever device each thread has).
result<std::unique_ptr<lease_ring>> make_pinned_ring(std::size_t slot_count, std::size_t slot_bytes, int device = -1);

// What a load takes from a context's pool (a pinned ring, a device buffer) and holds until it
// ends; destroying it gives the item back to the context. Move-only.
template <class T>
class pooled {
 public:
  pooled() noexcept = default;
  pooled(pooled&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)), item_(std::move(other.item_)) {}
  pooled& operator=(pooled&& other) noexcept {
    if (this != &other) {
      give_back();
      owner_ = std::exchange(other.owner_, nullptr);
      item_ = std::move(other.item_);
    }
    return *this;
  }
  pooled(const pooled&) = delete;
  pooled& operator=(const pooled&) = delete;
  ~pooled() { give_back(); }

  T& get() const noexcept { return *item_; }
  explicit operator bool() const noexcept { return item_ != nullptr; }

 private:
  friend class device_context;
  pooled(device_context* owner, std::unique_ptr<T> item) noexcept : owner_(owner), item_(std::move(item)) {}
  void give_back() noexcept;  // defined after device_context

  device_context* owner_ = nullptr;
  std::unique_ptr<T> item_;
};

// A pinned ring for one load (its leases must all have been returned when it goes back, which a
// finished load guarantees).
using pooled_ring = pooled<lease_ring>;
// Device memory for one load's own bookkeeping (decryption flags and kernel scratch); its
// contents are whatever the last load left.
using pooled_device_buffer = pooled<cuda::device_buffer>;

class device_context {
 public:
  // Creates `stream_count` streams on `device` (cuda::uploader::create); rings are made on first
  // use or by reserve_ring(). Fails with errc::no_device (no GPU, a build without CUDA, a device
  // that does not exist), errc::invalid_argument for a stream count outside the uploader's range.
  static result<std::unique_ptr<device_context>> create(int device,
                                                        int stream_count = cuda::uploader::default_stream_count);

  // The context of `device` shared by every load of this process: the one policy of every front
  // end (the CLI, the C++ facade, the C ABI, the Python module). Why one per device per process:
  // its streams, completion threads and pinned rings cost more than a load's own work (pinning a
  // first ring took 16-46 ms on an H100 host; Python loading per call reached 0.92x of the steady
  // state with a context per load, 1.00x with this one, run 6), and every later load, of any model,
  // reuses them. Made by the first call, with `stream_count` streams; a later call asking for
  // another count fails with errc::invalid_argument rather than silently getting the first's.
  // Thread-safe. It is never destroyed: tearing CUDA down from a static destructor can run after
  // the runtime's own teardown, and an idle context holds only sleeping threads, pinned memory and
  // streams, which the process's exit releases. Fails as create() does (and keeps failing for that
  // device).
  static result<device_context*> shared(int device, int stream_count = cuda::uploader::default_stream_count);

  // shared(device), then a ring of the default shape for a plain (verify false) or verified load
  // reserved in it: everything a first load on that device would otherwise make itself. For
  // callers that know the device before they open a model (the facade's prepare_device, Python).
  static result<void> prepare_shared(int device, bool verify = false);

  device_context(const device_context&) = delete;
  device_context& operator=(const device_context&) = delete;
  // Waits for every copy in flight (the uploader's destructor); every pooled_ring must be gone.
  ~device_context();

  int device() const noexcept { return uploader_.device(); }
  cuda::uploader& uploader() noexcept { return uploader_; }

  // A ring of `slot_count` pinned slots able to hold reads of `slot_bytes` (make_pinned_ring), from
  // the pool when one of that shape is idle, else made now (pinning costs about 10 ms per 64 MiB).
  // The pool keeps what loads give back, at most idle_rings_max rings; loads running at once each
  // hold their own. Fails as make_pinned_ring.
  result<pooled_ring> take_ring(std::size_t slot_count, std::size_t slot_bytes);

  // Makes a ring of this shape now unless one is idle, so that the next load finds it: callers
  // that open a model first call it beside the open (the CLI does), taking pinning off the load.
  result<void> reserve_ring(std::size_t slot_count, std::size_t slot_bytes);

  // Pinned bytes held by this context's rings, idle and in use.
  std::size_t pinned_bytes() const;

  // At least `size_bytes` of device memory on this context's device: the smallest idle buffer
  // that holds it, else a new one. Buffers of at most pooled_buffer_bytes_max go back to the pool
  // (at most idle_buffers_max of them); larger ones are freed when the load gives them back.
  // Before, each encrypted load allocated its flags and ended with a cudaFree, which waits for
  // the whole device: another load's copies, a serving process's kernels. Fails as
  // cuda::alloc_device.
  result<pooled_device_buffer> take_device_buffer(std::size_t size_bytes);

  // Device bytes in idle pooled buffers.
  std::size_t idle_device_bytes() const;

  static constexpr std::size_t idle_rings_max = 4;
  static constexpr std::size_t idle_buffers_max = 4;
  static constexpr std::size_t pooled_buffer_bytes_max = std::size_t{64} << 20;

 private:
  template <class T>
  friend class pooled;
  explicit device_context(cuda::uploader up) noexcept : uploader_(std::move(up)) {}
  void give_back(std::unique_ptr<lease_ring> ring) noexcept;
  void give_back(std::unique_ptr<cuda::device_buffer> buffer) noexcept;

  cuda::uploader uploader_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<lease_ring>> idle_;  // rings no load holds
  std::size_t pinned_bytes_ = 0;                   // of every ring made and not yet freed
  std::vector<std::unique_ptr<cuda::device_buffer>> idle_buffers_;  // device buffers no load holds
};

template <class T>
void pooled<T>::give_back() noexcept {
  if (owner_ != nullptr && item_) owner_->give_back(std::move(item_));
  owner_ = nullptr;
  item_.reset();
}

}  // namespace tz

// The per-device context: an uploader made once, and a pool of pinned staging rings that loads
// take and give back, so that no load pays for streams, threads or pinning.
#include "tz/engine/device_context.hpp"

#include "tz/engine/host_memory.hpp"

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tz {

namespace {

// The ring's memory: anonymous memory backed by transparent huge pages, each slot faulted in and
// pinned in place (cudaHostRegister) by the ring as it readies that slot. Pinning is a first
// load's largest fixed cost: on an H100 host cudaHostAlloc took about 40 ms for a 64 MiB ring
// (gpu_load_bench, "fresh ctx"), while registering an already populated 2 GiB mapping took 39 ms
// (docs/gpu.md, "Running on a bare GPU machine"), so the cost is in faulting and zeroing 4 KiB pages, which huge pages cut
// 512-fold; the 16 ms that was left for 64 MiB (46 ms for a verified load's 256 MiB) is now paid
// slot by slot beside the load, which starts once the first slot is pinned. gpu_load_bench times it.
class pinned_allocator final : public buffer_allocator {
 public:
  explicit pinned_allocator(int device) : device_(device) {}
  std::byte* allocate(std::size_t size_bytes) override {
    memory_ = host_buffer(size_bytes, /*huge_pages=*/true);
    return memory_.data();
  }
  void deallocate(std::byte*, std::size_t) noexcept override {
    {
      std::lock_guard lock(mutex_);
      pinned_.clear();  // unregisters before the memory goes
    }
    memory_ = host_buffer();
  }
  bool readies_slots() const noexcept override { return true; }
  void ready_slot(std::span<std::byte> slot) override {
    prefault(slot);
    auto b = cuda::register_pinned(slot, device_);
    if (!b) throw exception(b.error());
    std::lock_guard lock(mutex_);
    pinned_.push_back(std::move(*b));
  }

 private:
  int device_;  // current while pinning: the ring's thread has none of its own
  host_buffer memory_;
  std::mutex mutex_;  // ready_slot() runs on the ring's thread
  std::vector<cuda::pinned_buffer> pinned_;
};

result<void> check_ring(std::size_t slot_count, std::size_t slot_bytes) {
  if (slot_count == 0 || slot_bytes == 0) {
    return make_error(errc::invalid_argument, "load to device: the staging ring needs at least one slot of at least "
                                              "one byte (slot_count " + std::to_string(slot_count) +
                                                  ", slot_bytes " + std::to_string(slot_bytes) + ")");
  }
  if (slot_bytes > (std::size_t{1} << 40) / slot_count) {
    return make_error(errc::invalid_argument, "load to device: a staging ring of " + std::to_string(slot_count) +
                                                  " x " + std::to_string(slot_bytes) + " bytes is unreasonably large");
  }
  return {};
}

std::size_t ring_bytes(const lease_ring& r) noexcept { return r.slot_count() * r.slot_bytes(); }

}  // namespace

result<std::unique_ptr<lease_ring>> make_pinned_ring(std::size_t slot_count, std::size_t slot_bytes, int device) {
  TZ_CHECK(check_ring(slot_count, slot_bytes));
  try {
    return std::make_unique<lease_ring>(slot_count, slot_bytes + page_bytes, std::make_shared<pinned_allocator>(device));
  } catch (const exception& e) {
    return make_error(e.code(), std::string("staging ring: ") + e.what());
  } catch (const std::bad_alloc&) {
    return make_error(errc::io, "staging ring: out of host memory");
  }
}

result<std::unique_ptr<device_context>> device_context::create(int device, int stream_count) {
  TZ_TRY(up, cuda::uploader::create(device, stream_count));
  return std::unique_ptr<device_context>(new device_context(std::move(up)));
}

result<device_context*> device_context::shared(int device, int stream_count) {
  // Leaked on purpose (see the header): a heap map that no static destructor tears down.
  static auto* const mutex = new std::mutex;
  static auto* const contexts = new std::map<int, result<device_context*>>;
  std::lock_guard lock(*mutex);
  if (auto it = contexts->find(device); it != contexts->end()) {
    if (it->second && (*it->second)->uploader().stream_count() != stream_count)
      return make_error(errc::invalid_argument, "the context of cuda:" + std::to_string(device) + " was made with " +
                                                    std::to_string((*it->second)->uploader().stream_count()) +
                                                    " streams; " + std::to_string(stream_count) + " asked for");
    return it->second;
  }
  auto made = create(device, stream_count);
  result<device_context*> entry = made ? result<device_context*>(made->release()) : result<device_context*>(made.error());
  // A context that could not be made is not remembered when the device exists (a transient
  // failure may pass); "no such device" and "no GPU" stay the answer for this process.
  if (entry || entry.error().code == errc::no_device) contexts->emplace(device, entry);
  return entry;
}

device_context::~device_context() = default;

result<pooled_ring> device_context::take_ring(std::size_t slot_count, std::size_t slot_bytes) {
  {
    std::lock_guard lock(mutex_);
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if ((*it)->slot_count() == slot_count && (*it)->slot_bytes() == slot_bytes + page_bytes) {
        auto ring = std::move(*it);
        idle_.erase(it);
        return pooled_ring(this, std::move(ring));
      }
    }
  }
  TZ_TRY(ring, make_pinned_ring(slot_count, slot_bytes, device()));
  std::lock_guard lock(mutex_);
  pinned_bytes_ += ring_bytes(*ring);
  return pooled_ring(this, std::move(ring));
}

result<pooled_device_buffer> device_context::take_device_buffer(std::size_t size_bytes) {
  {
    std::lock_guard lock(mutex_);
    auto best = idle_buffers_.end();
    for (auto it = idle_buffers_.begin(); it != idle_buffers_.end(); ++it) {
      if ((*it)->size_bytes() >= size_bytes && (best == idle_buffers_.end() || (*it)->size_bytes() < (*best)->size_bytes()))
        best = it;
    }
    if (best != idle_buffers_.end()) {
      auto buffer = std::move(*best);
      idle_buffers_.erase(best);
      return pooled_device_buffer(this, std::move(buffer));
    }
  }
  TZ_TRY(buffer, cuda::alloc_device(device(), size_bytes));
  return pooled_device_buffer(this, std::make_unique<cuda::device_buffer>(std::move(buffer)));
}

std::size_t device_context::idle_device_bytes() const {
  std::lock_guard lock(mutex_);
  std::size_t bytes = 0;
  for (const auto& b : idle_buffers_) bytes += b->size_bytes();
  return bytes;
}

result<void> device_context::reserve_ring(std::size_t slot_count, std::size_t slot_bytes) {
  TZ_TRY(ring, take_ring(slot_count, slot_bytes));
  return {};  // `ring` goes back to the pool here, idle for the next load
}

std::size_t device_context::pinned_bytes() const {
  std::lock_guard lock(mutex_);
  return pinned_bytes_;
}

void device_context::give_back(std::unique_ptr<cuda::device_buffer> buffer) noexcept {
  std::unique_ptr<cuda::device_buffer> freed;  // freed outside the lock
  std::lock_guard lock(mutex_);
  if (buffer->size_bytes() <= pooled_buffer_bytes_max && idle_buffers_.size() < idle_buffers_max) {
    idle_buffers_.push_back(std::move(buffer));
  } else {
    freed = std::move(buffer);
  }
}

void device_context::give_back(std::unique_ptr<lease_ring> ring) noexcept {
  std::unique_ptr<lease_ring> freed;  // unpinned outside the lock
  std::lock_guard lock(mutex_);
  if (idle_.size() < idle_rings_max) {
    idle_.push_back(std::move(ring));
  } else {
    pinned_bytes_ -= ring_bytes(*ring);
    freed = std::move(ring);
  }
}

}  // namespace tz

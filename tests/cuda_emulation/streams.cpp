// The CUDA emulation's streams and events: a thread per stream runs its queued copies, fills and
// event records in order, each copy or fill after a random delay; copies from pinned memory are
// checked against the digest taken when they were queued.
#include "state.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tz_emulation {

namespace {

CUstream_st* find_stream(cudaStream_t s) {
  auto it = rt().streams.find(s);
  return it == rt().streams.end() ? nullptr : it->second.get();
}

std::shared_ptr<CUevent_st> find_event(cudaEvent_t e) {
  auto it = rt().events.find(e);
  return it == rt().events.end() ? nullptr : it->second;
}

// The stream, and the device bytes [device, device + size_bytes) as `op.dst` (in the backing of an
// allocation on the stream's device). Caller holds rt().mutex. cudaSuccess with a null stream: a
// zero-length operation, nothing to queue.
cudaError_t resolve(cudaStream_t stream, void* device, std::size_t size_bytes, CUstream_st*& s, operation& op) {
  s = find_stream(stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (size_bytes == 0) {
    s = nullptr;
    return cudaSuccess;
  }
  device_allocation* a = find_device_range(device, size_bytes);
  if (a == nullptr || a->device != s->device) return fail(cudaErrorInvalidValue);
  op.dst = a->backing + (static_cast<std::byte*>(device) - a->address);
  op.size_bytes = size_bytes;
  return cudaSuccess;
}

std::shared_ptr<CUevent_st> locked_find_event(cudaEvent_t e) {
  std::lock_guard lock(rt().mutex);
  return find_event(e);
}

void execute(CUstream_st& s, operation& op) {
  if (op.what != operation::kind::record && rt().config.copy_delay_max_us > 0) {
    std::uniform_int_distribution<std::uint32_t> delay(0, rt().config.copy_delay_max_us);
    std::this_thread::sleep_for(std::chrono::microseconds(delay(s.random)));
  }
  switch (op.what) {
    case operation::kind::copy:
      if (sticky() != cudaSuccess) return;
      if (op.fail) {
        raise_sticky(cudaErrorIllegalAddress);
        return;
      }
      if (!op.staged.empty()) {
        std::memcpy(op.dst, op.staged.data(), op.size_bytes);
        return;
      }
      if (digest(op.src, op.size_bytes) != op.digest) {
        std::fprintf(stderr,
                     "CUDA emulation: the %zu host bytes at %p changed between cudaMemcpyAsync and the copy on its "
                     "stream: a pinned buffer was reused before its upload completed\n",
                     op.size_bytes, static_cast<const void*>(op.src));
        std::abort();
      }
      std::memcpy(op.dst, op.src, op.size_bytes);
      return;
    case operation::kind::fill:
      if (sticky() == cudaSuccess) std::memset(op.dst, op.value, op.size_bytes);
      return;
    case operation::kind::work:
      if (sticky() == cudaSuccess) op.work();
      return;
    case operation::kind::record: {
      std::lock_guard lock(op.event->mutex);
      op.event->completed = std::max(op.event->completed, op.generation);
      op.event->changed.notify_all();
      return;
    }
  }
}

void run_stream(CUstream_st* s) {
  std::unique_lock lock(s->mutex);
  for (;;) {
    s->wake.wait(lock, [&] { return s->stopping || !s->queue.empty(); });
    if (s->queue.empty()) return;  // stopping, every operation done
    operation op = std::move(s->queue.front());
    s->queue.pop_front();
    s->running = true;
    lock.unlock();
    execute(*s, op);
    op = operation();  // drop the event reference outside the lock
    lock.lock();
    s->running = false;
    if (s->queue.empty()) s->idle.notify_all();
  }
}

void push(CUstream_st& s, operation op) {
  {
    std::lock_guard lock(s.mutex);
    s.queue.push_back(std::move(op));
  }
  s.wake.notify_one();
}

void wait_idle(CUstream_st& s) {
  std::unique_lock lock(s.mutex);
  s.idle.wait(lock, [&] { return s.queue.empty() && !s.running; });
}

}  // namespace

// Waits for every stream, as the freeing calls of the runtime do. Caller holds no lock.
void synchronize_all() {
  std::vector<CUstream_st*> all;
  {
    std::lock_guard lock(rt().mutex);
    for (auto& [handle, s] : rt().streams) all.push_back(s.get());
  }
  for (CUstream_st* s : all) wait_idle(*s);
}

}  // namespace tz_emulation

using namespace tz_emulation;

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t size_bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (sticky() != cudaSuccess) return fail(sticky());
  if (kind != cudaMemcpyHostToDevice) return fail(cudaErrorNotSupported);
  operation op;
  CUstream_st* s = nullptr;
  {
    runtime& r = rt();
    std::lock_guard lock(r.mutex);
    if (cudaError_t rc = resolve(stream, dst, size_bytes, s, op); rc != cudaSuccess || s == nullptr) return rc;
    const auto* from = static_cast<const std::byte*>(src);
    if (is_pinned(src, size_bytes)) {
      op.src = from;
      op.digest = digest(from, size_bytes);
    } else {
      op.staged.assign(from, from + size_bytes);
      ++r.pageable_copies;
    }
    op.fail = ++r.copies == r.fail_at;
    r.copied_bytes += size_bytes;
  }
  push(*s, std::move(op));
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* device, int value, std::size_t size_bytes, cudaStream_t stream) {
  if (sticky() != cudaSuccess) return fail(sticky());
  operation op;
  op.what = operation::kind::fill;
  CUstream_st* s = nullptr;
  {
    std::lock_guard lock(rt().mutex);
    if (cudaError_t rc = resolve(stream, device, size_bytes, s, op); rc != cudaSuccess || s == nullptr) return rc;
    op.value = value;
  }
  push(*s, std::move(op));
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  if (sticky() != cudaSuccess) return fail(sticky());
  runtime& r = rt();
  std::lock_guard lock(r.mutex);
  if (!valid_device(current_device())) return fail(cudaErrorInvalidDevice);
  auto s = std::make_unique<CUstream_st>();
  s->device = current_device();
  s->random.seed(static_cast<unsigned>(r.streams.size() * 7919 + 17));
  CUstream_st* raw = s.get();
  s->worker = std::thread(run_stream, raw);
  r.streams.emplace(raw, std::move(s));
  *stream = raw;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::unique_ptr<CUstream_st> s;
  {
    std::lock_guard lock(rt().mutex);
    auto it = rt().streams.find(stream);
    if (it == rt().streams.end()) return fail(cudaErrorInvalidResourceHandle);
    s = std::move(it->second);
    rt().streams.erase(it);
  }
  {
    std::lock_guard lock(s->mutex);
    s->stopping = true;
  }
  s->wake.notify_one();
  s->worker.join();  // after its queue is done
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUstream_st* s = nullptr;
  {
    std::lock_guard lock(rt().mutex);
    s = find_stream(stream);
  }
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  wait_idle(*s);
  return sticky() != cudaSuccess ? fail(sticky()) : cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  if (sticky() != cudaSuccess) return fail(sticky());
  auto e = std::make_shared<CUevent_st>();
  e->device = current_device();
  std::lock_guard lock(rt().mutex);
  rt().events.emplace(e.get(), e);
  *event = e.get();
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::shared_ptr<CUevent_st> e;  // a queued record operation may keep it a little longer
  std::lock_guard lock(rt().mutex);
  auto it = rt().events.find(event);
  if (it == rt().events.end()) return fail(cudaErrorInvalidResourceHandle);
  e = std::move(it->second);
  rt().events.erase(it);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (sticky() != cudaSuccess) return fail(sticky());
  operation op;
  op.what = operation::kind::record;
  CUstream_st* s = nullptr;
  {
    std::lock_guard lock(rt().mutex);
    s = find_stream(stream);
    op.event = find_event(event);
    if (s == nullptr || op.event == nullptr) return fail(cudaErrorInvalidResourceHandle);
    if (op.event->device != s->device) return fail(cudaErrorInvalidResourceHandle);  // as on a GPU
  }
  {
    std::lock_guard lock(op.event->mutex);
    op.generation = ++op.event->recorded;
  }
  push(*s, std::move(op));
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  const std::shared_ptr<CUevent_st> e = locked_find_event(event);
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(e->mutex);
  if (e->completed < e->recorded) return cudaErrorNotReady;
  return sticky() != cudaSuccess ? fail(sticky()) : cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  const std::shared_ptr<CUevent_st> e = locked_find_event(event);
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle);
  std::unique_lock lock(e->mutex);
  const std::uint64_t target = e->recorded;
  e->changed.wait(lock, [&] { return e->completed >= target; });
  return sticky() != cudaSuccess ? fail(sticky()) : cudaSuccess;
}

namespace tz::cuda::emulation {

bool enqueue_work(void* stream, std::function<void()> work) {
  operation op;
  op.what = operation::kind::work;
  op.work = std::move(work);
  CUstream_st* s = nullptr;
  {
    std::lock_guard lock(rt().mutex);
    s = find_stream(static_cast<cudaStream_t>(stream));
  }
  if (s == nullptr) return false;
  push(*s, std::move(op));
  return true;
}

std::byte* device_bytes(const void* device, std::size_t size_bytes) {
  std::lock_guard lock(rt().mutex);
  device_allocation* a = find_device_range(device, size_bytes);
  return a == nullptr ? nullptr : a->backing + (static_cast<const std::byte*>(device) - a->address);
}

}  // namespace tz::cuda::emulation

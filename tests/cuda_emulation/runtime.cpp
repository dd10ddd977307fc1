// The host emulation of the CUDA runtime API declared in cuda_runtime.h, for tests without a GPU.
//
// - Device memory: cudaMalloc reserves an inaccessible range (its address is what callers get,
//   like a device pointer under UVA: the host faults on it) and a private backing the copies write.
// - Streams: a thread per stream runs its operations in order; each copy or fill first waits a
//   random time up to settings::copy_delay_max_us. Events complete when their record operation
//   runs, so queries and waits see exactly the stream order a GPU gives.
// - Copies from pinned memory (cudaHostAlloc'ed or cudaHostRegister'ed) read the host bytes when
//   they run; a digest taken at enqueue is compared then, and a difference aborts the process: the
//   caller reused a buffer before its copy completed. Copies from pageable memory are staged at the
//   call, as the real runtime does.
// - A failure injected by fail_copy() is sticky, as a real asynchronous fault: every later call
//   returns it, events still complete (reporting it), and frees still free.
// - cudaFree, cudaFreeHost and cudaHostUnregister wait for every stream first, as they do on a GPU.
#include "cuda_runtime.h"

#include "tz/cuda_emulation.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

struct CUevent_st {
  int device = 0;
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t recorded = 0;   // generation of the latest cudaEventRecord
  std::uint64_t completed = 0;  // generation whose record operation has run
};

namespace {

struct operation {
  enum class kind { copy, fill, record } what = kind::copy;
  std::byte* dst = nullptr;        // in a device allocation's backing
  const std::byte* src = nullptr;  // pinned host bytes, read when the copy runs
  std::vector<std::byte> staged;   // pageable host bytes, taken at the call
  std::size_t size_bytes = 0;
  int value = 0;
  std::uint64_t digest = 0;
  bool fail = false;
  std::shared_ptr<CUevent_st> event;
  std::uint64_t generation = 0;
};

}  // namespace

struct CUstream_st {
  int device = 0;
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable idle;
  std::deque<operation> queue;
  bool running = false;  // an operation taken off the queue has not finished
  bool stopping = false;
  std::minstd_rand random;
  std::thread worker;
};

namespace {

using tz::cuda::emulation::counters;
using tz::cuda::emulation::settings;

struct device_allocation {
  std::byte* address = nullptr;  // inaccessible reservation: what the caller holds
  std::byte* backing = nullptr;  // where the bytes live
  std::size_t size_bytes = 0;
  std::size_t mapped_bytes = 0;
  int device = 0;
};

struct host_range {
  std::byte* begin = nullptr;
  std::size_t size_bytes = 0;
  bool allocated = false;  // cudaHostAlloc (else cudaHostRegister)
};

struct runtime {
  std::mutex mutex;
  settings config;
  std::map<std::uintptr_t, device_allocation> device_memory;  // by address
  std::map<std::uintptr_t, host_range> pinned;                 // by first byte
  std::vector<std::size_t> device_used = std::vector<std::size_t>(1, 0);
  std::unordered_map<CUstream_st*, std::unique_ptr<CUstream_st>> streams;
  std::unordered_map<CUevent_st*, std::shared_ptr<CUevent_st>> events;
  std::size_t host_bytes = 0;
  std::size_t host_bytes_max = 0;
  std::uint64_t copies = 0;
  std::uint64_t pageable_copies = 0;
  std::uint64_t copied_bytes = 0;
  std::uint64_t fail_at = 0;  // copy number that fails (0: none)
  std::atomic<int> sticky{cudaSuccess};
};

// Never destroyed: stream threads of streams nobody destroyed may still run at exit.
runtime& rt() {
  static runtime* r = new runtime();
  return *r;
}

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

cudaError_t sticky() { return static_cast<cudaError_t>(rt().sticky.load()); }

std::size_t page_size() {
  static const std::size_t p = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

std::size_t round_up_to_page(std::size_t n) { return (n + page_size() - 1) / page_size() * page_size(); }

// 64-bit FNV-1a over 8-byte words (then the tail): cheap enough to run over every queued copy.
std::uint64_t digest(const std::byte* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ static_cast<std::uint64_t>(p[i])) * 1099511628211ull;
  return h;
}

bool valid_device(int device) { return device >= 0 && device < rt().config.device_count; }

// The allocation holding [p, p + n), or null. Caller holds rt().mutex.
device_allocation* find_device_range(const void* p, std::size_t n) {
  auto& map = rt().device_memory;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  auto it = map.upper_bound(at);
  if (it == map.begin()) return nullptr;
  --it;
  device_allocation& a = it->second;
  if (at - it->first > a.size_bytes || n > a.size_bytes - (at - it->first)) return nullptr;
  return &a;
}

// True when [p, p + n) lies inside one pinned range. Caller holds rt().mutex.
bool is_pinned(const void* p, std::size_t n) {
  auto& map = rt().pinned;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  auto it = map.upper_bound(at);
  if (it == map.begin()) return false;
  --it;
  return at - it->first <= it->second.size_bytes && n <= it->second.size_bytes - (at - it->first);
}

// True when [p, p + n) overlaps a pinned range. Caller holds rt().mutex.
bool overlaps_pinned(const void* p, std::size_t n) {
  auto& map = rt().pinned;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  auto it = map.lower_bound(at + n);  // first range starting at or after the end
  if (it == map.begin()) return false;
  --it;
  return it->first + it->second.size_bytes > at;
}

CUstream_st* find_stream(cudaStream_t s) {
  auto it = rt().streams.find(s);
  return it == rt().streams.end() ? nullptr : it->second.get();
}

std::shared_ptr<CUevent_st> find_event(cudaEvent_t e) {
  auto it = rt().events.find(e);
  return it == rt().events.end() ? nullptr : it->second;
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
        int expected = cudaSuccess;
        rt().sticky.compare_exchange_strong(expected, cudaErrorIllegalAddress);
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

// Waits for every stream, as the freeing calls of the runtime do. Caller holds no lock.
void synchronize_all() {
  std::vector<CUstream_st*> all;
  {
    std::lock_guard lock(rt().mutex);
    for (auto& [handle, s] : rt().streams) all.push_back(s.get());
  }
  for (CUstream_st* s : all) wait_idle(*s);
}

}  // namespace

namespace tz::cuda::emulation {

bool configure(const settings& s) {
  runtime& r = rt();
  std::lock_guard lock(r.mutex);
  if (!r.device_memory.empty() || !r.pinned.empty() || !r.streams.empty() || !r.events.empty()) return false;
  if (s.device_count < 0) return false;
  r.config = s;
  r.device_used.assign(static_cast<std::size_t>(std::max(1, s.device_count)), 0);
  return true;
}

settings current_settings() {
  std::lock_guard lock(rt().mutex);
  return rt().config;
}

void fail_copy(std::uint64_t nth) {
  std::lock_guard lock(rt().mutex);
  rt().fail_at = nth == 0 ? 0 : rt().copies + nth;
}

int current_device() { return ::current_device; }

void clear_sticky_error() { rt().sticky = cudaSuccess; }

counters snapshot() {
  runtime& r = rt();
  std::lock_guard lock(r.mutex);
  counters c;
  c.device_allocations = r.device_memory.size();
  for (std::size_t used : r.device_used) c.device_bytes += used;
  for (const auto& [at, range] : r.pinned) {
    if (range.allocated) ++c.host_allocations;
    else ++c.registrations;
  }
  c.host_bytes = r.host_bytes;
  c.host_bytes_max = r.host_bytes_max;
  c.streams = r.streams.size();
  c.events = r.events.size();
  c.copies = r.copies;
  c.pageable_copies = r.pageable_copies;
  c.copied_bytes = r.copied_bytes;
  return c;
}

void reset_peaks() {
  std::lock_guard lock(rt().mutex);
  rt().host_bytes_max = rt().host_bytes;
}

}  // namespace tz::cuda::emulation

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorCudartUnloading: return "cudaErrorCudartUnloading";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorHostMemoryAlreadyRegistered: return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered: return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorCudartUnloading: return "driver shutting down";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered (injected by the CUDA emulation)";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorNotSupported: return "operation not supported (by the CUDA emulation)";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() { return std::exchange(last_error, cudaSuccess); }

cudaError_t cudaGetDeviceCount(int* count) {
  std::lock_guard lock(rt().mutex);
  *count = rt().config.device_count;
  return *count == 0 ? fail(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  std::lock_guard lock(rt().mutex);
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  std::lock_guard lock(rt().mutex);
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  *properties = cudaDeviceProp{};
  std::snprintf(properties->name, sizeof properties->name, "tensorizer CUDA emulation %d (host memory)", device);
  properties->totalGlobalMem = rt().config.device_bytes;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  std::lock_guard lock(rt().mutex);
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  *value = attribute == cudaDevAttrHostRegisterReadOnlySupported ? 1 : 0;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  std::lock_guard lock(rt().mutex);
  if (!valid_device(current_device)) return fail(cudaErrorInvalidDevice);
  *total_bytes = rt().config.device_bytes;
  *free_bytes = *total_bytes - rt().device_used[static_cast<std::size_t>(current_device)];
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** host, std::size_t size_bytes, unsigned) {
  if (sticky() != cudaSuccess) return fail(sticky());
  if (size_bytes == 0) return fail(cudaErrorInvalidValue);
  // Populated, as pinning does.
  void* p = ::mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
  runtime& r = rt();
  std::lock_guard lock(r.mutex);
  r.pinned[reinterpret_cast<std::uintptr_t>(p)] = {static_cast<std::byte*>(p), size_bytes, true};
  r.host_bytes += size_bytes;
  r.host_bytes_max = std::max(r.host_bytes_max, r.host_bytes);
  *host = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* host) {
  if (host == nullptr) return cudaSuccess;
  synchronize_all();
  runtime& r = rt();
  std::size_t size_bytes = 0;
  {
    std::lock_guard lock(r.mutex);
    auto it = r.pinned.find(reinterpret_cast<std::uintptr_t>(host));
    if (it == r.pinned.end() || !it->second.allocated) return fail(cudaErrorInvalidValue);
    size_bytes = it->second.size_bytes;
    r.pinned.erase(it);
    r.host_bytes -= size_bytes;
  }
  ::munmap(host, size_bytes);
  return sticky();
}

cudaError_t cudaHostRegister(void* host, std::size_t size_bytes, unsigned) {
  if (sticky() != cudaSuccess) return fail(sticky());
  if (host == nullptr || size_bytes == 0) return fail(cudaErrorInvalidValue);
  // Every page must be mapped (mincore fails with ENOMEM otherwise); pinning then faults them in.
  const auto at = reinterpret_cast<std::uintptr_t>(host);
  const std::uintptr_t first_page = at / page_size() * page_size();
  const std::size_t span = round_up_to_page(at + size_bytes - first_page);
  std::vector<unsigned char> residency(span / page_size());
  if (::mincore(reinterpret_cast<void*>(first_page), span, residency.data()) != 0) return fail(cudaErrorInvalidValue);
  {
    std::lock_guard lock(rt().mutex);
    if (overlaps_pinned(host, size_bytes)) return fail(cudaErrorHostMemoryAlreadyRegistered);
    rt().pinned[at] = {static_cast<std::byte*>(host), size_bytes, false};
  }
  const auto* bytes = static_cast<const volatile unsigned char*>(host);
  for (std::size_t off = 0; off < size_bytes; off += page_size()) static_cast<void>(bytes[off]);
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* host) {
  synchronize_all();
  std::lock_guard lock(rt().mutex);
  auto it = rt().pinned.find(reinterpret_cast<std::uintptr_t>(host));
  if (it == rt().pinned.end() || it->second.allocated) return fail(cudaErrorHostMemoryNotRegistered);
  rt().pinned.erase(it);
  return sticky();
}

cudaError_t cudaMalloc(void** device, std::size_t size_bytes) {
  if (sticky() != cudaSuccess) return fail(sticky());
  runtime& r = rt();
  std::lock_guard lock(r.mutex);
  if (!valid_device(current_device)) return fail(cudaErrorInvalidDevice);
  std::size_t& used = r.device_used[static_cast<std::size_t>(current_device)];
  if (size_bytes > r.config.device_bytes - used) return fail(cudaErrorMemoryAllocation);
  if (size_bytes == 0) {
    *device = nullptr;
    return cudaSuccess;
  }
  const std::size_t mapped = round_up_to_page(size_bytes);
  void* address = ::mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (address == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
  void* backing = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (backing == MAP_FAILED) {
    ::munmap(address, mapped);
    return fail(cudaErrorMemoryAllocation);
  }
  // cudaMalloc'ed memory holds garbage: make reading it before a copy visible in tests.
  std::memset(backing, 0xA5, size_bytes);
  r.device_memory[reinterpret_cast<std::uintptr_t>(address)] = {
      static_cast<std::byte*>(address), static_cast<std::byte*>(backing), size_bytes, mapped, current_device};
  used += size_bytes;
  *device = address;
  return cudaSuccess;
}

cudaError_t cudaFree(void* device) {
  if (device == nullptr) return cudaSuccess;
  synchronize_all();
  runtime& r = rt();
  device_allocation a;
  {
    std::lock_guard lock(r.mutex);
    auto it = r.device_memory.find(reinterpret_cast<std::uintptr_t>(device));
    if (it == r.device_memory.end()) return fail(cudaErrorInvalidValue);
    a = it->second;
    r.device_memory.erase(it);
    r.device_used[static_cast<std::size_t>(a.device)] -= a.size_bytes;
  }
  ::munmap(a.address, a.mapped_bytes);
  ::munmap(a.backing, a.mapped_bytes);
  return sticky();
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t size_bytes, cudaMemcpyKind kind) {
  if (sticky() != cudaSuccess) return fail(sticky());
  if (kind != cudaMemcpyDeviceToHost) return fail(cudaErrorNotSupported);
  if (size_bytes == 0) return cudaSuccess;
  std::lock_guard lock(rt().mutex);
  device_allocation* a = find_device_range(src, size_bytes);
  if (a == nullptr) return fail(cudaErrorInvalidValue);
  std::memcpy(dst, a->backing + (static_cast<const std::byte*>(src) - a->address), size_bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t size_bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (sticky() != cudaSuccess) return fail(sticky());
  if (kind != cudaMemcpyHostToDevice) return fail(cudaErrorNotSupported);
  operation op;
  CUstream_st* s = nullptr;
  {
    runtime& r = rt();
    std::lock_guard lock(r.mutex);
    s = find_stream(stream);
    if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
    if (size_bytes == 0) return cudaSuccess;
    device_allocation* a = find_device_range(dst, size_bytes);
    if (a == nullptr || a->device != s->device) return fail(cudaErrorInvalidValue);
    op.dst = a->backing + (static_cast<std::byte*>(dst) - a->address);
    op.size_bytes = size_bytes;
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
    s = find_stream(stream);
    if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
    if (size_bytes == 0) return cudaSuccess;
    device_allocation* a = find_device_range(device, size_bytes);
    if (a == nullptr || a->device != s->device) return fail(cudaErrorInvalidValue);
    op.dst = a->backing + (static_cast<std::byte*>(device) - a->address);
    op.size_bytes = size_bytes;
    op.value = value;
  }
  push(*s, std::move(op));
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  if (sticky() != cudaSuccess) return fail(sticky());
  runtime& r = rt();
  std::lock_guard lock(r.mutex);
  if (!valid_device(current_device)) return fail(cudaErrorInvalidDevice);
  auto s = std::make_unique<CUstream_st>();
  s->device = current_device;
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
  e->device = current_device;
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
  std::shared_ptr<CUevent_st> e;
  {
    std::lock_guard lock(rt().mutex);
    e = find_event(event);
  }
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(e->mutex);
  if (e->completed < e->recorded) return cudaErrorNotReady;
  return sticky() != cudaSuccess ? fail(sticky()) : cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::shared_ptr<CUevent_st> e;
  {
    std::lock_guard lock(rt().mutex);
    e = find_event(event);
  }
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle);
  std::unique_lock lock(e->mutex);
  const std::uint64_t target = e->recorded;
  e->changed.wait(lock, [&] { return e->completed >= target; });
  return sticky() != cudaSuccess ? fail(sticky()) : cudaSuccess;
}

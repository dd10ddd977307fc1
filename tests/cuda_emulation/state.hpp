// Private to the CUDA emulation: the state shared by its three parts (control.cpp: settings, counters,
// errors, devices; memory.cpp: allocations, registrations, synchronous copies; streams.cpp: streams,
// events, queued copies). What it emulates, and how:
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
#pragma once

#include "cuda_runtime.h"

#include "tz/cuda_emulation.hpp"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

struct CUevent_st {
  int device = 0;
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t recorded = 0;   // generation of the latest cudaEventRecord
  std::uint64_t completed = 0;  // generation whose record operation has run
};

namespace tz_emulation {

struct operation {
  enum class kind { copy, fill, record, work } what = kind::copy;
  std::function<void()> work;      // kind::work: an emulated kernel, run in stream order
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

}  // namespace tz_emulation

struct CUstream_st {
  int device = 0;
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable idle;
  std::deque<tz_emulation::operation> queue;
  bool running = false;  // an operation taken off the queue has not finished
  bool stopping = false;
  std::minstd_rand random;
  std::thread worker;
};

namespace tz_emulation {

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
  std::uint64_t device_mallocs = 0;  // cudaMalloc calls that allocated, so far
  std::uint64_t device_frees = 0;    // cudaFree calls that freed, so far
  std::uint64_t pageable_copies = 0;
  std::uint64_t copied_bytes = 0;
  std::uint64_t fail_at = 0;  // copy number that fails (0: none)
  std::atomic<int> sticky{cudaSuccess};
};

// The one runtime of the process. Never destroyed: stream threads of streams nobody destroyed may
// still run at exit.
runtime& rt();

// The calling thread's current device (cudaSetDevice). A function, not an `extern thread_local`:
// GCC reaches an extern thread_local through a TLS wrapper that UBSan reports as a null load.
int& current_device();

// Records `e` as the calling thread's last error (cudaGetLastError) and returns it.
cudaError_t fail(cudaError_t e);
inline cudaError_t sticky() { return static_cast<cudaError_t>(rt().sticky.load()); }
// An asynchronous fault of a queued operation (a failed copy, a kernel reading outside device
// memory): becomes the sticky error unless one is already set.
inline void raise_sticky(cudaError_t e) {
  int expected = cudaSuccess;
  rt().sticky.compare_exchange_strong(expected, e);
}

inline std::size_t page_size() {
  static const std::size_t p = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}
inline std::size_t round_up_to_page(std::size_t n) { return (n + page_size() - 1) / page_size() * page_size(); }
inline bool valid_device(int device) { return device >= 0 && device < rt().config.device_count; }

// memory.cpp. Callers hold rt().mutex.
std::uint64_t digest(const std::byte* p, std::size_t n);
device_allocation* find_device_range(const void* p, std::size_t n);  // the allocation holding [p, p + n)
bool is_pinned(const void* p, std::size_t n);                        // inside one pinned range

// streams.cpp. Waits for every stream, as the freeing calls of the runtime do; caller holds no lock.
void synchronize_all();

}  // namespace tz_emulation

// The CUDA emulation's memory: pinned host allocations and registrations, device allocations (an
// inaccessible reservation as the address, a private backing for the bytes), synchronous downloads.
#include "state.hpp"

#include <sys/mman.h>

#include <cstring>

namespace tz_emulation {

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

namespace {

// True when [p, p + n) overlaps a pinned range. Caller holds rt().mutex.
bool overlaps_pinned(const void* p, std::size_t n) {
  auto& map = rt().pinned;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  auto it = map.lower_bound(at + n);  // first range starting at or after the end
  if (it == map.begin()) return false;
  --it;
  return it->first + it->second.size_bytes > at;
}

}  // namespace

}  // namespace tz_emulation

using namespace tz_emulation;

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
  if (!valid_device(current_device())) return fail(cudaErrorInvalidDevice);
  std::size_t& used = r.device_used[static_cast<std::size_t>(current_device())];
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
      static_cast<std::byte*>(address), static_cast<std::byte*>(backing), size_bytes, mapped, current_device()};
  used += size_bytes;
  ++r.device_mallocs;
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
    ++r.device_frees;
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

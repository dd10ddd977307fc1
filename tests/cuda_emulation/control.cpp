// The CUDA emulation's controls (tz/cuda_emulation.hpp), its errors and its devices.
#include "state.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace tz_emulation {

runtime& rt() {
  static runtime* r = new runtime();
  return *r;
}

int& current_device() {
  thread_local int device = 0;
  return device;
}
thread_local cudaError_t last_error = cudaSuccess;

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

}  // namespace tz_emulation

using namespace tz_emulation;

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

int current_device() { return tz_emulation::current_device(); }

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
  c.device_mallocs = r.device_mallocs;
  c.device_frees = r.device_frees;
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
  *device = current_device();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  std::lock_guard lock(rt().mutex);
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  current_device() = device;
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

cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  std::lock_guard lock(rt().mutex);
  if (!valid_device(current_device())) return fail(cudaErrorInvalidDevice);
  *total_bytes = rt().config.device_bytes;
  *free_bytes = *total_bytes - rt().device_used[static_cast<std::size_t>(current_device())];
  return cudaSuccess;
}

// tests/device_access.h over the CUDA runtime API this module is compiled against: the toolkit's
// libcudart, the host emulation's cuda_runtime.h (tests/cuda_emulation/), or none (TZ_HAVE_CUDA 0).
// No C++ runtime is used, so C test programs link it without libstdc++. The DLPack reader, for the
// Python module only, is in dltensor_access.cpp.
#include "device_access.h"

#if TZ_HAVE_CUDA
#include <cuda_runtime.h>
#endif

extern "C" int tz_test_device_count(void) {
#if TZ_HAVE_CUDA
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
#else
  return 0;
#endif
}

extern "C" int tz_test_device_read(void* host, const void* device, size_t size_bytes) {
#if TZ_HAVE_CUDA
  return cudaMemcpy(host, device, size_bytes, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
#else
  (void)host, (void)device, (void)size_bytes;
  return -1;
#endif
}

extern "C" void* tz_test_device_alloc(size_t size_bytes) {
#if TZ_HAVE_CUDA
  void* p = nullptr;
  return cudaMalloc(&p, size_bytes) == cudaSuccess ? p : nullptr;
#else
  (void)size_bytes;
  return nullptr;
#endif
}

extern "C" void tz_test_device_free(void* device) {
#if TZ_HAVE_CUDA
  if (device) static_cast<void>(cudaFree(device));
#else
  (void)device;
#endif
}

// A host emulation of the part of the CUDA runtime API that cuda/ calls, for CI machines without a
// GPU. The tz_cuda_emulated library compiles cuda/'s runtime sources against this header instead of
// the toolkit's, so the uploader, the device loads and the GPU benchmark run unchanged on the host.
//
// What it keeps of CUDA's contract (memory.cpp: allocations and registrations; streams.cpp: queued
// copies and events): device memory is not host-accessible (a device address points into an
// inaccessible reservation, as with UVA); copies from pinned memory run later,
// in stream order, on a thread per stream, after an optional random delay; events complete in stream
// order; copies from pageable memory are staged; asynchronous failures are sticky; handles and ranges
// are checked. It also checks what CUDA leaves undefined: host bytes changed while their upload is
// still queued abort the process with a message (a staging buffer reused too early).
//
// Functions have C++ linkage, so they can never be confused with libcudart's C symbols.
#pragma once

#include <cstddef>

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorCudartUnloading = 4,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorHostMemoryAlreadyRegistered = 712,
  cudaErrorHostMemoryNotRegistered = 713,
  cudaErrorNotSupported = 801,
};
using cudaError_t = cudaError;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;

struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
};

inline constexpr unsigned cudaHostAllocPortable = 0x01;
inline constexpr unsigned cudaHostRegisterPortable = 0x01;
inline constexpr unsigned cudaEventBlockingSync = 0x01;
inline constexpr unsigned cudaEventDisableTiming = 0x02;
inline constexpr unsigned cudaStreamNonBlocking = 0x01;

const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError();

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device);
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes);

cudaError_t cudaHostAlloc(void** host, std::size_t size_bytes, unsigned flags);
cudaError_t cudaFreeHost(void* host);
cudaError_t cudaHostRegister(void* host, std::size_t size_bytes, unsigned flags);
cudaError_t cudaHostUnregister(void* host);
cudaError_t cudaMalloc(void** device, std::size_t size_bytes);
cudaError_t cudaFree(void* device);

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t size_bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t size_bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* device, int value, std::size_t size_bytes, cudaStream_t stream);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);

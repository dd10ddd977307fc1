// DLPack export: hands loaded tensors to embedding applications (PyTorch, CuPy, JAX) without a copy.
// The C structs below follow the public DLPack specification v0.8 (written here, not vendored).
#pragma once

#include "tz/base/error.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

// The ABI structs, guarded like the reference header so that an application including both this
// file and its own dlpack.h (in either order) sees one definition of each.
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#define DLPACK_VERSION 80
#define DLPACK_ABI_VERSION 1

extern "C" {

// Where the bytes live; values fixed by the specification.
typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

// Element kinds for DLDataType::code.
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
} DLDataTypeCode;

typedef struct {
  uint8_t code;    // a DLDataTypeCode
  uint8_t bits;    // bits per lane, e.g. 16 for float16
  uint16_t lanes;  // 1 for scalars
} DLDataType;

typedef struct {
  void* data;  // start of the allocation; the tensor begins byte_offset bytes later
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;    // ndim extents
  int64_t* strides;  // ndim strides in elements, or NULL for compact row-major
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;                             // the producer's bookkeeping
  void (*deleter)(struct DLManagedTensor* self);  // the consumer calls it once when done
} DLManagedTensor;

}  // extern "C"

#endif  // DLPACK_DLPACK_H_

namespace tz::cuda {

// Calls the tensor's own deleter: the ownership rule of DLPack, as a unique_ptr deleter.
struct dlpack_deleter {
  void operator()(DLManagedTensor* tensor) const noexcept {
    if (tensor != nullptr && tensor->deleter != nullptr) tensor->deleter(tensor);
  }
};

// A DLManagedTensor we still own; release() it when handing it to a consumer (e.g. a PyCapsule).
using managed_tensor_ptr = std::unique_ptr<DLManagedTensor, dlpack_deleter>;

// Most dimensions accepted; a bound so a corrupt shape cannot ask for absurd bookkeeping.
inline constexpr std::size_t dlpack_ndim_max = 32;

// Wraps `data` (compact row-major, `shape` extents) as a DLManagedTensor on `device`. The tensor
// copies the shape, carries explicit row-major strides and holds `owner` until its deleter runs, so
// the bytes stay alive as long as the consumer needs them. Fails with errc::invalid_argument for
// more than dlpack_ndim_max dimensions, a negative extent, zero bits or lanes, or a null `data`
// with a non-empty shape.
result<managed_tensor_ptr> to_dlpack(void* data, DLDevice device, DLDataType dtype,
                                     std::span<const std::int64_t> shape, std::shared_ptr<void> owner);

// Host memory (kDLCPU, device 0).
result<managed_tensor_ptr> to_dlpack_host(void* data, DLDataType dtype, std::span<const std::int64_t> shape,
                                          std::shared_ptr<void> owner);

// Memory of CUDA device `device` (kDLCUDA), e.g. a device_buffer's data() with the buffer as owner.
// Fails with errc::no_device in a build without CUDA.
result<managed_tensor_ptr> to_dlpack_cuda(void* device_data, int device, DLDataType dtype,
                                          std::span<const std::int64_t> shape, std::shared_ptr<void> owner);

}  // namespace tz::cuda

// DLPack export: wraps memory we own as a DLManagedTensor that keeps its owner alive until deleted.
#include "tz/cuda/cuda.hpp"
#include "tz/cuda/dlpack.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace tz::cuda {
namespace {

// Everything the tensor points into, freed together by its deleter.
struct dlpack_context {
  DLManagedTensor tensor{};
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  std::shared_ptr<void> owner;
};

void delete_context(DLManagedTensor* self) noexcept { delete static_cast<dlpack_context*>(self->manager_ctx); }

result<void> check_shape(void* data, DLDataType dtype, std::span<const std::int64_t> shape) {
  if (shape.size() > dlpack_ndim_max) {
    return make_error(errc::invalid_argument, "DLPack export: " + std::to_string(shape.size()) +
                                                  " dimensions, at most " + std::to_string(dlpack_ndim_max));
  }
  if (dtype.bits == 0 || dtype.lanes == 0) {
    return make_error(errc::invalid_argument, "DLPack export: dtype with " + std::to_string(dtype.bits) +
                                                  " bits and " + std::to_string(dtype.lanes) + " lanes");
  }
  bool has_elements = true;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return make_error(errc::invalid_argument, "DLPack export: extent " + std::to_string(shape[i]) +
                                                    " of dimension " + std::to_string(i) + " is negative");
    }
    if (shape[i] == 0) has_elements = false;
  }
  if (data == nullptr && has_elements) {
    return make_error(errc::invalid_argument, "DLPack export: null data for a non-empty tensor");
  }
  return {};
}

}  // namespace

result<managed_tensor_ptr> to_dlpack(void* data, DLDevice device, DLDataType dtype,
                                     std::span<const std::int64_t> shape, std::shared_ptr<void> owner) {
  TZ_CHECK(check_shape(data, dtype, shape));
  auto context = std::make_unique<dlpack_context>();
  context->shape.assign(shape.begin(), shape.end());
  // Explicit row-major strides: some consumers mishandle the NULL "compact" shorthand.
  context->strides.resize(shape.size());
  std::int64_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    context->strides[i] = stride;
    stride *= std::max<std::int64_t>(shape[i], 1);
  }
  context->owner = std::move(owner);

  DLTensor& t = context->tensor.dl_tensor;
  t.data = data;
  t.device = device;
  t.ndim = static_cast<std::int32_t>(shape.size());
  t.dtype = dtype;
  t.shape = context->shape.empty() ? nullptr : context->shape.data();
  t.strides = context->strides.empty() ? nullptr : context->strides.data();
  t.byte_offset = 0;
  context->tensor.manager_ctx = context.get();
  context->tensor.deleter = &delete_context;
  return managed_tensor_ptr(&context.release()->tensor);
}

result<managed_tensor_ptr> to_dlpack_host(void* data, DLDataType dtype, std::span<const std::int64_t> shape,
                                          std::shared_ptr<void> owner) {
  return to_dlpack(data, DLDevice{kDLCPU, 0}, dtype, shape, std::move(owner));
}

result<managed_tensor_ptr> to_dlpack_cuda(void* device_data, int device, DLDataType dtype,
                                          std::span<const std::int64_t> shape, std::shared_ptr<void> owner) {
  if (!built_with_cuda()) {
    return make_error(errc::no_device, "DLPack export to cuda:" + std::to_string(device) +
                                           ": this build has no CUDA support (built without nvcc)");
  }
  if (device < 0) {
    return make_error(errc::invalid_argument, "DLPack export: device index " + std::to_string(device) + " is negative");
  }
  return to_dlpack(device_data, DLDevice{kDLCUDA, device}, dtype, shape, std::move(owner));
}

}  // namespace tz::cuda

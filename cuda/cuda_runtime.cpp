// The CUDA stage over the runtime API: devices, pinned host memory, device memory, downloads.
#include "cuda_detail.hpp"

#include <optional>
#include <string>

namespace tz::cuda {
namespace detail {

std::string device_label(int device) { return "cuda:" + std::to_string(device); }

error failure(std::string_view call, cudaError_t code, int device, std::string_view what) {
  const bool missing = code == cudaErrorInsufficientDriver || code == cudaErrorNoDevice ||
                       code == cudaErrorInvalidDevice;
  std::string message = std::string(call) + " failed on " + device_label(device);
  if (!what.empty()) message += " (" + std::string(what) + ")";
  message += ": " + std::string(cudaGetErrorName(code)) + ": " + cudaGetErrorString(code);
  return make_error(missing ? errc::no_device : errc::cuda, std::move(message));
}

result<void> check_device(int device, std::string_view what) {
  TZ_TRY(count, device_count());
  if (device >= 0 && device < count) return {};
  return make_error(errc::no_device, std::string(what) + ": " + device_label(device) + " does not exist (" +
                                         std::to_string(count) + " CUDA device(s) visible)");
}

result<device_scope> device_scope::enter(int device, std::string_view what) {
  int current = -1;
  cudaError_t rc = cudaGetDevice(&current);
  if (rc != cudaSuccess) return failure("cudaGetDevice", rc, device, what);
  if (current == device) return device_scope(-1);
  rc = cudaSetDevice(device);
  if (rc != cudaSuccess) return failure("cudaSetDevice", rc, device, what);
  return device_scope(current);
}

device_scope::~device_scope() {
  if (previous_ >= 0) static_cast<void>(cudaSetDevice(previous_));
}

}  // namespace detail

using detail::device_label;
using detail::failure;

bool built_with_cuda() noexcept { return true; }

result<int> device_count() {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc == cudaErrorInsufficientDriver || rc == cudaErrorNoDevice) {
    // Clear the per-thread "last error" so a later unrelated check does not see it.
    static_cast<void>(cudaGetLastError());
    return 0;
  }
  if (rc != cudaSuccess) return failure("cudaGetDeviceCount", rc, -1, "counting devices");
  return count;
}

result<device_info> describe_device(int device) {
  TZ_CHECK(detail::check_device(device, "describe_device"));
  TZ_TRY(scope, detail::device_scope::enter(device, "describe_device"));
  cudaDeviceProp properties{};
  cudaError_t rc = cudaGetDeviceProperties(&properties, device);
  if (rc != cudaSuccess) return failure("cudaGetDeviceProperties", rc, device, "describe_device");
  device_info info;
  info.device = device;
  info.name = properties.name;
  rc = cudaMemGetInfo(&info.free_bytes, &info.total_bytes);
  if (rc != cudaSuccess) return failure("cudaMemGetInfo", rc, device, "describe_device");
  return info;
}

result<pinned_buffer> alloc_pinned(std::size_t size_bytes) {
  if (size_bytes == 0) return pinned_buffer();
  void* data = nullptr;
  cudaError_t rc = cudaHostAlloc(&data, size_bytes, cudaHostAllocPortable);
  if (rc != cudaSuccess) {
    int current = -1;
    static_cast<void>(cudaGetDevice(&current));
    return failure("cudaHostAlloc", rc, current, "pinned host buffer of " + std::to_string(size_bytes) + " bytes");
  }
  return pinned_buffer(static_cast<std::byte*>(data), size_bytes, false);
}

result<pinned_buffer> register_pinned(std::span<std::byte> memory, int device) {
  if (memory.empty()) return pinned_buffer();
  std::optional<detail::device_scope> scope;
  if (device >= 0) {
    TZ_TRY(entered, detail::device_scope::enter(device, "pinning caller memory"));
    scope.emplace(std::move(entered));
  }
  cudaError_t rc = cudaHostRegister(memory.data(), memory.size(), cudaHostRegisterPortable);
  if (rc != cudaSuccess) {
    int current = -1;
    static_cast<void>(cudaGetDevice(&current));
    return failure("cudaHostRegister", rc, current,
                   "pinning " + std::to_string(memory.size()) + " caller bytes in place");
  }
  return pinned_buffer(memory.data(), memory.size(), true);
}

void pinned_buffer::release() noexcept {
  if (data_ == nullptr) return;
  // Errors are ignored: a destructor cannot report them, and at process exit the runtime may
  // already be unloading (cudaErrorCudartUnloading), which frees everything anyway.
  if (registered_) {
    static_cast<void>(cudaHostUnregister(data_));
  } else {
    static_cast<void>(cudaFreeHost(data_));
  }
  data_ = nullptr;
  size_bytes_ = 0;
  registered_ = false;
}

result<device_buffer> alloc_device(int device, std::size_t size_bytes) {
  const std::string what = "device buffer of " + std::to_string(size_bytes) + " bytes";
  TZ_CHECK(detail::check_device(device, what));
  if (size_bytes == 0) return device_buffer(nullptr, 0, device);
  TZ_TRY(scope, detail::device_scope::enter(device, what));
  void* data = nullptr;
  cudaError_t rc = cudaMalloc(&data, size_bytes);
  if (rc != cudaSuccess) return failure("cudaMalloc", rc, device, what);
  return device_buffer(data, size_bytes, device);
}

result<device_buffer> borrow_device(int device, void* data, std::size_t size_bytes) {
  TZ_CHECK(detail::check_device(device, "borrowing device memory"));
  if (data == nullptr && size_bytes != 0)
    return make_error(errc::invalid_argument, "borrowing device memory: a null address for " +
                                                  std::to_string(size_bytes) + " bytes on cuda:" + std::to_string(device));
  return device_buffer(data, size_bytes, device, false);
}

void device_buffer::release() noexcept {
  if (data_ != nullptr && owned_) {
    auto scope = detail::device_scope::enter(device_, "freeing a device buffer");
    static_cast<void>(cudaFree(data_));  // ignored for the reasons given in pinned_buffer::release
  }
  data_ = nullptr;
  size_bytes_ = 0;
  device_ = -1;
}

result<void> zero_async(void* device_data, std::size_t size_bytes, void* cuda_stream) {
  if (size_bytes == 0) return {};
  cudaError_t rc = cudaMemsetAsync(device_data, 0, size_bytes, static_cast<cudaStream_t>(cuda_stream));
  if (rc != cudaSuccess) {
    int device = -1;
    static_cast<void>(cudaGetDevice(&device));
    return failure("cudaMemsetAsync", rc, device, "zeroing " + std::to_string(size_bytes) + " device bytes");
  }
  return {};
}

result<void> download(const device_buffer& src, std::size_t offset_bytes, std::span<std::byte> host) {
  const std::string what = "download of " + std::to_string(host.size()) + " bytes from offset " +
                           std::to_string(offset_bytes) + " of a " + std::to_string(src.size_bytes()) +
                           "-byte device buffer";
  if (offset_bytes > src.size_bytes() || host.size() > src.size_bytes() - offset_bytes) {
    return make_error(errc::invalid_argument, what + ": range outside the buffer");
  }
  if (host.empty()) return {};
  TZ_TRY(scope, detail::device_scope::enter(src.device(), what));
  const auto* from = static_cast<const std::byte*>(src.data()) + offset_bytes;
  cudaError_t rc = cudaMemcpy(host.data(), from, host.size(), cudaMemcpyDeviceToHost);
  if (rc != cudaSuccess) return failure("cudaMemcpy", rc, src.device(), what);
  return {};
}

}  // namespace tz::cuda

// The CUDA stage of a build without nvcc: no devices, and every call says so with errc::no_device.
#include "tz/cuda/cuda.hpp"

#include <string>

namespace tz::cuda {
namespace {

error no_cuda(const std::string& what) {
  return make_error(errc::no_device, what + ": this build of tensorizer has no CUDA support (built without nvcc); "
                                            "load to host memory or rebuild with the CUDA toolkit");
}

}  // namespace

// Never constructed here; defined so uploader's unique_ptr<state> has a complete type.
struct uploader::state {};

bool built_with_cuda() noexcept { return false; }

result<int> device_count() { return 0; }

result<device_info> describe_device(int device) {
  return no_cuda("describe_device(cuda:" + std::to_string(device) + ")");
}

result<pinned_buffer> alloc_pinned(std::size_t size_bytes) {
  return no_cuda("pinned host buffer of " + std::to_string(size_bytes) + " bytes");
}

result<pinned_buffer> register_pinned(std::span<std::byte> memory, int /*device*/) {
  return no_cuda("pinning " + std::to_string(memory.size()) + " caller bytes in place");
}

// Nothing can own memory in this build: buffers and tickets are only ever empty.
void pinned_buffer::release() noexcept {}
void device_buffer::release() noexcept {}
void upload_ticket::release() noexcept {}

result<device_buffer> alloc_device(int device, std::size_t size_bytes) {
  return no_cuda("device buffer of " + std::to_string(size_bytes) + " bytes on cuda:" + std::to_string(device));
}

result<device_buffer> borrow_device(int device, void*, std::size_t size_bytes) {
  return no_cuda("borrowing " + std::to_string(size_bytes) + " device bytes on cuda:" + std::to_string(device));
}

result<void> zero_async(void*, std::size_t size_bytes, void*) {
  return no_cuda("zeroing " + std::to_string(size_bytes) + " device bytes");
}

result<void> download(const device_buffer& src, std::size_t offset_bytes, std::span<std::byte> host) {
  return no_cuda("download of " + std::to_string(host.size()) + " bytes from offset " + std::to_string(offset_bytes) +
                 " of a " + std::to_string(src.size_bytes()) + "-byte device buffer");
}

result<uploader> uploader::create(int device, int stream_count) {
  return no_cuda("creating an uploader with " + std::to_string(stream_count) + " streams on cuda:" +
                 std::to_string(device));
}

uploader::uploader(std::unique_ptr<state> s) noexcept : state_(std::move(s)) {}
uploader::uploader(uploader&& other) noexcept = default;
uploader& uploader::operator=(uploader&& other) noexcept = default;
uploader::~uploader() = default;

int uploader::device() const noexcept { return -1; }
int uploader::stream_count() const noexcept { return 0; }

result<upload_ticket> uploader::upload(std::span<const std::byte> host, device_buffer&, std::size_t offset_bytes) {
  return no_cuda("upload of " + std::to_string(host.size()) + " bytes to device offset " + std::to_string(offset_bytes));
}

result<upload_ticket> uploader::upload(std::span<const std::byte> host, device_buffer& dst, std::size_t offset_bytes,
                                       upload_callback) {
  return upload(host, dst, offset_bytes);
}

result<upload_ticket> uploader::upload(std::span<const upload_piece> pieces, device_buffer&, upload_callback) {
  return no_cuda("batched upload of " + std::to_string(pieces.size()) + " pieces");
}

result<upload_ticket> uploader::upload(std::span<const upload_piece> pieces, device_buffer&, upload_callback,
                                       const after_copies_fn&) {
  return no_cuda("batched upload of " + std::to_string(pieces.size()) + " pieces");
}

result<upload_ticket> uploader::fill_zero(device_buffer&, std::size_t offset_bytes, std::size_t size_bytes) {
  return no_cuda("zero fill of " + std::to_string(size_bytes) + " bytes at device offset " +
                 std::to_string(offset_bytes));
}

bool uploader::done(const upload_ticket&) const noexcept { return true; }
result<void> uploader::wait(const upload_ticket&) const { return {}; }
result<void> uploader::synchronize() { return no_cuda("synchronizing an uploader"); }

}  // namespace tz::cuda

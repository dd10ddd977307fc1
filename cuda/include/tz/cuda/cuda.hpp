// The CUDA stage behind one header: device discovery, pinned host memory, device memory and a
// multi-stream uploader. It names no CUDA type, so the engine builds against the null
// implementation (cuda_null.cpp) on machines without nvcc, and against the runtime API otherwise.
#pragma once

#include "tz/base/error.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace tz::cuda {

// True when this build links the CUDA runtime (TZ_HAVE_CUDA=1); false for the null build, where
// device_count() is 0 and every other call fails with errc::no_device.
bool built_with_cuda() noexcept;

// Number of CUDA devices this process can use. "No driver" (cudaErrorInsufficientDriver) and "no
// device" (cudaErrorNoDevice) both mean 0, not an error: a machine without a GPU is normal.
// Fails (errc::cuda) only when the runtime reports something else, e.g. a broken driver install.
result<int> device_count();

// True when device_count() is at least 1. Errors count as "not available".
bool available();

// Parses a device name: "cuda" means device 0, "cuda:N" device N. Checks only the syntax (and
// that N fits an int); whether device N exists is checked by the call that uses it.
// Fails with errc::invalid_argument naming the text.
result<int> parse_device(std::string_view spec);

// What one device is and how much of its memory is free right now (cudaMemGetInfo).
struct device_info {
  int device = -1;
  std::string name;
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

// Describes device `device`. Fails with errc::no_device when it does not exist.
result<device_info> describe_device(int device);

// Page-locked host memory that the GPU can DMA from directly: the slots of the engine's lease
// ring. Move-only; the destructor frees it (cudaFreeHost) or, for memory the caller registered,
// unregisters it (cudaHostRegister'ed memory stays owned by the caller). Destroy it after every
// upload reading from it has completed.
class pinned_buffer {
 public:
  pinned_buffer() noexcept = default;
  pinned_buffer(pinned_buffer&& other) noexcept;
  pinned_buffer& operator=(pinned_buffer&& other) noexcept;
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  ~pinned_buffer();

  std::byte* data() const noexcept { return data_; }
  std::size_t size_bytes() const noexcept { return size_bytes_; }
  std::span<std::byte> bytes() const noexcept { return {data_, size_bytes_}; }
  bool empty() const noexcept { return size_bytes_ == 0; }
  // True when the bytes belong to the caller and were only pinned by register_pinned().
  bool registered() const noexcept { return registered_; }

 private:
  friend result<pinned_buffer> alloc_pinned(std::size_t size_bytes);
  friend result<pinned_buffer> register_pinned(std::span<std::byte> memory, int device);
  pinned_buffer(std::byte* data, std::size_t size_bytes, bool registered) noexcept
      : data_(data), size_bytes_(size_bytes), registered_(registered) {}
  void release() noexcept;

  std::byte* data_ = nullptr;
  std::size_t size_bytes_ = 0;
  bool registered_ = false;
};

// Allocates `size_bytes` of pinned host memory usable with every device (cudaHostAlloc, portable;
// not write-combined because the engine verifies and decrypts in place on these bytes). A size of
// 0 gives an empty buffer. Fails with errc::no_device without a GPU and errc::cuda when the
// allocation is refused; falling back to pageable memory is the caller's choice.
result<pinned_buffer> alloc_pinned(std::size_t size_bytes);

// Pins caller-owned memory in place (cudaHostRegister, portable). The memory must outlive the
// returned buffer, whose destructor unregisters it. Errors as alloc_pinned. With `device` >= 0 the
// call runs with that device current (the thread's own is restored), so that a thread that never
// chose a device does not make device 0's context for it.
result<pinned_buffer> register_pinned(std::span<std::byte> memory, int device = -1);

// One contiguous allocation in the memory of one device (cudaMalloc). Move-only; the destructor
// frees it with that device made current, restoring the caller's current device afterwards. A
// borrowed buffer (borrow_device) names caller memory and frees nothing.
class device_buffer {
 public:
  device_buffer() noexcept = default;
  device_buffer(device_buffer&& other) noexcept;
  device_buffer& operator=(device_buffer&& other) noexcept;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer();

  // A device address: never dereference it on the host.
  void* data() const noexcept { return data_; }
  std::size_t size_bytes() const noexcept { return size_bytes_; }
  int device() const noexcept { return device_; }
  bool empty() const noexcept { return size_bytes_ == 0; }

 private:
  friend result<device_buffer> alloc_device(int device, std::size_t size_bytes);
  friend result<device_buffer> borrow_device(int device, void* data, std::size_t size_bytes);
  device_buffer(void* data, std::size_t size_bytes, int device, bool owned = true) noexcept
      : data_(data), size_bytes_(size_bytes), device_(device), owned_(owned) {}
  void release() noexcept;

  void* data_ = nullptr;
  std::size_t size_bytes_ = 0;
  int device_ = -1;
  bool owned_ = true;
};

// Allocates `size_bytes` on device `device`. A size of 0 gives an empty buffer (after the device
// index is checked). Fails with errc::no_device for a device that does not exist and errc::cuda
// when the allocation is refused (out of memory), naming the device and size.
result<device_buffer> alloc_device(int device, std::size_t size_bytes);

// Caller memory on device `device`, [data, data + size_bytes) (a CUDA tensor's storage, say), as a
// buffer to upload into; it never frees it, so the memory must outlive every upload into it.
// Fails with errc::no_device for a device that does not exist (or a build without CUDA) and
// errc::invalid_argument for a null address with a non-zero size.
result<device_buffer> borrow_device(int device, void* data, std::size_t size_bytes);

// Enqueues setting `size_bytes` device bytes at `device_data` (current device) to zero on
// `cuda_stream` (a cudaStream_t) and returns without waiting (cudaMemsetAsync): for memory that
// work enqueued after it on that stream writes, such as the decryption kernels' flags. Fails with
// errc::cuda when the call is refused.
result<void> zero_async(void* device_data, std::size_t size_bytes, void* cuda_stream);

// Copies device bytes [offset_bytes, offset_bytes + host.size()) into `host`, blocking until done
// (cudaMemcpy). For tests and tools: it does not wait for uploads in flight on an uploader's
// streams, so wait for those first. Fails with errc::invalid_argument for a range outside `src`.
result<void> download(const device_buffer& src, std::size_t offset_bytes, std::span<std::byte> host);

// Proof of one upload in flight: owns the CUDA event recorded after the copy. Move-only and
// cheap; destroying it before the copy completes is allowed (the copy still completes) but then
// nobody can observe its outcome.
class upload_ticket {
 public:
  upload_ticket() noexcept = default;
  upload_ticket(upload_ticket&& other) noexcept;
  upload_ticket& operator=(upload_ticket&& other) noexcept;
  upload_ticket(const upload_ticket&) = delete;
  upload_ticket& operator=(const upload_ticket&) = delete;
  ~upload_ticket();

  std::size_t size_bytes() const noexcept { return size_bytes_; }
  std::size_t offset_bytes() const noexcept { return offset_bytes_; }
  int stream_index() const noexcept { return stream_; }
  // An empty ticket (default-constructed or moved-from) is always done.
  bool empty() const noexcept { return event_ == nullptr; }

 private:
  friend class uploader;
  void release() noexcept;

  void* event_ = nullptr;  // cudaEvent_t, kept opaque
  int device_ = -1;
  int stream_ = -1;
  std::size_t size_bytes_ = 0;
  std::size_t offset_bytes_ = 0;
};

// One piece of a batched upload: `host` is copied to device offset `offset_bytes` of the destination.
struct upload_piece {
  std::span<const std::byte> host;
  std::size_t offset_bytes = 0;
};

// Called once when an upload has completed (or failed), with its outcome. It runs on the uploader's
// completion thread of that upload's stream (the stream itself keeps copying meanwhile), so it
// delays only the completions queued behind it: it must not block or throw, and should do little
// more than return a buffer or post work to the caller's event loop (e.g. boost::asio::post).
using upload_callback = std::function<void(result<void>)>;

// Work an upload puts on its stream after its copies and before its completion is recorded, e.g.
// a kernel that decrypts the bytes just copied: called on the uploading thread with the stream (a
// cudaStream_t, kept opaque) and its index. Its error fails the upload: on_done then receives it
// once the stream has passed the copies, so the host bytes stay owned until then.
using after_copies_fn = std::function<result<void>(void* stream, int stream_index)>;

// Host-to-device copies spread round-robin over a few streams of one device. Created by the caller
// and passed down; nothing here has static lifetime. upload() may be called from several threads.
// The destructor reports every pending completion, waits for every copy in flight, then destroys the streams.
class uploader {
 public:
  static constexpr int default_stream_count = 4;
  static constexpr int stream_count_max = 64;

  // Creates `stream_count` non-blocking streams on `device`. Fails with errc::no_device for a
  // missing device, errc::invalid_argument for a stream count outside [1, stream_count_max].
  static result<uploader> create(int device, int stream_count = default_stream_count);

  uploader(uploader&& other) noexcept;
  uploader& operator=(uploader&& other) noexcept;
  uploader(const uploader&) = delete;
  uploader& operator=(const uploader&) = delete;
  ~uploader();

  int device() const noexcept;
  int stream_count() const noexcept;

  // Starts copying `host` into `dst` at `offset_bytes` on the next stream (cudaMemcpyAsync) and
  // records an event. Returns at once; `host` must stay valid and unmodified until the ticket is
  // done. From pinned memory the copy is truly asynchronous; from pageable memory CUDA stages it
  // and the call may block. Fails with errc::invalid_argument when the range does not fit `dst`
  // or `dst` lives on another device, errc::cuda when CUDA refuses to enqueue.
  result<upload_ticket> upload(std::span<const std::byte> host, device_buffer& dst, std::size_t offset_bytes);

  // As above, and `on_done` is called once with the copy's outcome when it completes: a
  // blocking-sync event recorded after the copy is waited on by a thread per stream (started on
  // first use), which also reports a failed context, so a waiting lease is never stranded. See
  // upload_callback for what it may do. When this call itself fails, `on_done` is not called.
  // The returned ticket is empty (always done): the outcome is reported to `on_done` alone.
  result<upload_ticket> upload(std::span<const std::byte> host, device_buffer& dst, std::size_t offset_bytes,
                               upload_callback on_done);

  // Copies every piece on ONE stream (the next one), in order, then records one event and, when
  // `on_done` is set, calls it once after the last copy: a staging buffer holding several tensors
  // is released by a single callback. The ticket's size is the sum of the pieces, its offset the
  // first piece's. All pieces are checked before anything is enqueued; errors as upload().
  result<upload_ticket> upload(std::span<const upload_piece> pieces, device_buffer& dst, upload_callback on_done);

  // As above, with `after` run on the same stream behind the copies (see after_copies_fn); the
  // completion covers both. `on_done` is required.
  result<upload_ticket> upload(std::span<const upload_piece> pieces, device_buffer& dst, upload_callback on_done,
                               const after_copies_fn& after);

  // Sets `size_bytes` device bytes at `offset_bytes` of `dst` to zero on the next stream
  // (cudaMemsetAsync) and records an event: meta tensors, which have no stored bytes. Ordered with
  // later work on that stream only; synchronize() or wait() covers it. Errors as upload().
  result<upload_ticket> fill_zero(device_buffer& dst, std::size_t offset_bytes, std::size_t size_bytes);

  // True once the ticket's copy has finished or failed (cudaEventQuery); never blocks. After it
  // turns true, wait() returns the outcome without blocking.
  bool done(const upload_ticket& ticket) const noexcept;

  // Blocks until the ticket's copy has finished (cudaEventSynchronize). Fails with errc::cuda
  // naming the copy (bytes, offset, stream, device) when it, or earlier work, failed.
  result<void> wait(const upload_ticket& ticket) const;

  // Blocks until every stream is idle; returns the first error any stream reports.
  result<void> synchronize();

 private:
  struct state;
  struct stream_work;
  explicit uploader(std::unique_ptr<state> s) noexcept;
  result<upload_ticket> upload_pieces(std::span<const upload_piece> pieces, device_buffer& dst,
                                      upload_callback on_done, const after_copies_fn* after);
  result<upload_ticket> enqueue(const stream_work& work, device_buffer& dst, std::size_t size_bytes,
                                std::size_t offset_bytes, upload_callback on_done);
  std::unique_ptr<state> state_;
};

}  // namespace tz::cuda

// The uploader over the runtime API: cudaMemcpyAsync round-robin over streams, one event per upload.
// Completions are observed by one thread per stream that waits on blocking-sync events in stream
// order, never by stream callbacks: a callback holds its stream until it returns and CUDA runs all
// callbacks of a process on one thread, which capped a load at about one lease per 70-100 us.
#include "cuda_detail.hpp"

#include <atomic>
#include <cassert>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace tz::cuda {

using detail::device_label;
using detail::failure;

namespace {

std::string describe_upload(std::size_t size_bytes, std::size_t offset_bytes, int stream) {
  return "upload of " + std::to_string(size_bytes) + " bytes to device offset " + std::to_string(offset_bytes) +
         " on stream " + std::to_string(stream);
}

// One upload whose completion someone asked to hear about.
struct pending_completion {
  cudaEvent_t event = nullptr;
  upload_callback on_done;
  std::size_t size_bytes = 0;
  std::size_t offset_bytes = 0;
};

// The completions of one stream: a FIFO in stream order, drained by a thread started on first use.
// Its events are recycled (created blocking-sync, so the waiting thread sleeps instead of spinning
// on a core the readers need).
class completion_lane {
 public:
  completion_lane(int device, int stream) : device_(device), stream_(stream) {}
  completion_lane(const completion_lane&) = delete;
  completion_lane& operator=(const completion_lane&) = delete;

  // Records an event on `stream` and queues `on_done` behind it. On failure nothing is queued and
  // `on_done` is left untouched for the caller (it will not be called).
  result<void> add(cudaStream_t stream, upload_callback& on_done, std::size_t size_bytes, std::size_t offset_bytes) {
    std::unique_lock lock(mutex_);
    cudaEvent_t event = nullptr;
    if (!free_events_.empty()) {
      event = free_events_.back();
      free_events_.pop_back();
    } else if (cudaError_t rc = cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventBlockingSync);
               rc != cudaSuccess) {
      return failure("cudaEventCreateWithFlags", rc, device_, describe_upload(size_bytes, offset_bytes, stream_));
    }
    // Recorded under the lock so that the queue's order is the stream's order.
    if (cudaError_t rc = cudaEventRecord(event, stream); rc != cudaSuccess) {
      free_events_.push_back(event);
      return failure("cudaEventRecord", rc, device_, describe_upload(size_bytes, offset_bytes, stream_));
    }
    if (!thread_.joinable()) {
      try {
        thread_ = std::thread([this] { drain(); });
      } catch (const std::system_error&) {
        // The copies are queued but nobody could report them: wait here instead.
        lock.unlock();
        cudaError_t rc = cudaEventSynchronize(event);
        finish({event, std::move(on_done), size_bytes, offset_bytes}, rc);
        return {};
      }
    }
    queue_.push_back({event, std::move(on_done), size_bytes, offset_bytes});
    lock.unlock();
    wake_.notify_one();
    return {};
  }

  // Reports every queued completion (waiting for the copies), then stops the thread.
  void stop() noexcept {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
    for (cudaEvent_t e : free_events_) static_cast<void>(cudaEventDestroy(e));
    free_events_.clear();
  }

 private:
  void drain() noexcept {
    // Events belong to the device's primary context; make it current once for this thread.
    static_cast<void>(cudaSetDevice(device_));
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to report
      pending_completion p = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      const cudaError_t rc = cudaEventSynchronize(p.event);
      finish(std::move(p), rc);
      lock.lock();
    }
  }

  // Calls the callback with the outcome and recycles the event (or destroys it after a failure).
  void finish(pending_completion p, cudaError_t rc) noexcept {
    if (rc == cudaSuccess) {
      p.on_done(result<void>());
    } else {
      p.on_done(failure("cudaMemcpyAsync", rc, device_,
                        describe_upload(p.size_bytes, p.offset_bytes, stream_) + ", reported by its completion event"));
    }
    std::lock_guard lock(mutex_);
    if (rc == cudaSuccess) {
      free_events_.push_back(p.event);
    } else {
      static_cast<void>(cudaEventDestroy(p.event));
    }
  }

  const int device_;
  const int stream_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<pending_completion> queue_;
  std::vector<cudaEvent_t> free_events_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

struct uploader::state {
  int device = -1;
  std::vector<cudaStream_t> streams;
  std::vector<std::unique_ptr<completion_lane>> lanes;  // one per stream
  // One per stream, held while an upload enqueues its copies, the work after them and its
  // completion: an upload's operations stay contiguous on its stream. Work after the copies needs
  // it: the secretbox open is two kernels sharing the stream's scratch, and another thread's pair
  // enqueued between them would overwrite it (seen on an H100: MAC failures at 1 stream, none
  // with 1 reader).
  std::vector<std::unique_ptr<std::mutex>> enqueue_mutexes;
  std::atomic<unsigned> next_stream{0};

  ~state() {
    if (streams.empty()) return;
    auto scope = detail::device_scope::enter(device, "destroying an uploader");
    // Every completion is reported first (each lane waits for its copies), then the streams go.
    for (auto& lane : lanes) lane->stop();
    for (cudaStream_t stream : streams) {
      // Wait first: the copies read caller memory that may be freed right after we return.
      static_cast<void>(cudaStreamSynchronize(stream));
      static_cast<void>(cudaStreamDestroy(stream));
    }
  }
};

namespace {

result<void> check_range(std::size_t size_bytes, const device_buffer& dst, std::size_t offset_bytes, int device) {
  if (dst.device() != device) {
    return make_error(errc::invalid_argument, describe_upload(size_bytes, offset_bytes, -1) + ": destination is on " +
                                                  device_label(dst.device()) + ", the uploader on " +
                                                  device_label(device));
  }
  if (offset_bytes > dst.size_bytes() || size_bytes > dst.size_bytes() - offset_bytes) {
    return make_error(errc::invalid_argument, describe_upload(size_bytes, offset_bytes, -1) + ": range outside the " +
                                                  std::to_string(dst.size_bytes()) + "-byte destination on " +
                                                  device_label(device));
  }
  return {};
}

}  // namespace

result<uploader> uploader::create(int device, int stream_count) {
  const std::string what = "creating an uploader with " + std::to_string(stream_count) + " streams";
  if (stream_count < 1 || stream_count > stream_count_max) {
    return make_error(errc::invalid_argument,
                      what + ": stream count must be in [1, " + std::to_string(stream_count_max) + "]");
  }
  TZ_CHECK(detail::check_device(device, what));
  TZ_TRY(scope, detail::device_scope::enter(device, what));
  auto s = std::make_unique<state>();
  s->device = device;
  s->streams.reserve(static_cast<std::size_t>(stream_count));
  for (int i = 0; i < stream_count; ++i) {
    cudaStream_t stream = nullptr;
    // Non-blocking: our copies must not serialize with an embedding application's legacy stream.
    cudaError_t rc = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (rc != cudaSuccess) return failure("cudaStreamCreateWithFlags", rc, device, what);
    s->streams.push_back(stream);
    s->lanes.push_back(std::make_unique<completion_lane>(device, i));
    s->enqueue_mutexes.push_back(std::make_unique<std::mutex>());
  }
  return uploader(std::move(s));
}

uploader::uploader(std::unique_ptr<state> s) noexcept : state_(std::move(s)) {}
uploader::uploader(uploader&& other) noexcept = default;
uploader& uploader::operator=(uploader&& other) noexcept = default;
uploader::~uploader() = default;

int uploader::device() const noexcept { return state_ ? state_->device : -1; }
int uploader::stream_count() const noexcept { return state_ ? static_cast<int>(state_->streams.size()) : 0; }

result<upload_ticket> uploader::upload(std::span<const std::byte> host, device_buffer& dst, std::size_t offset_bytes) {
  return upload(host, dst, offset_bytes, upload_callback());
}

result<upload_ticket> uploader::upload(std::span<const std::byte> host, device_buffer& dst, std::size_t offset_bytes,
                                       upload_callback on_done) {
  const upload_piece one[1] = {{host, offset_bytes}};
  return upload(one, dst, std::move(on_done));
}

// What one enqueue puts on its stream before the event: copies, or a zero fill.
struct uploader::stream_work {
  std::span<const upload_piece> pieces;
  std::size_t zero_offset_bytes = 0;
  std::size_t zero_bytes = 0;               // > 0: a cudaMemsetAsync instead of copies
  const after_copies_fn* after = nullptr;  // behind the copies, before the completion
};

result<upload_ticket> uploader::upload(std::span<const upload_piece> pieces, device_buffer& dst,
                                       upload_callback on_done) {
  return upload_pieces(pieces, dst, std::move(on_done), nullptr);
}

result<upload_ticket> uploader::upload(std::span<const upload_piece> pieces, device_buffer& dst,
                                       upload_callback on_done, const after_copies_fn& after) {
  assert(on_done && "upload with work after the copies needs a completion callback");
  return upload_pieces(pieces, dst, std::move(on_done), &after);
}

result<upload_ticket> uploader::upload_pieces(std::span<const upload_piece> pieces, device_buffer& dst,
                                              upload_callback on_done, const after_copies_fn* after) {
  assert(state_ && "upload on a moved-from uploader");
  std::size_t total_bytes = 0;
  for (const upload_piece& p : pieces) {
    TZ_CHECK(check_range(p.host.size(), dst, p.offset_bytes, state_->device));
    total_bytes += p.host.size();
  }
  const std::size_t first_offset = pieces.empty() ? 0 : pieces.front().offset_bytes;
  return enqueue(stream_work{pieces, 0, 0, after}, dst, total_bytes, first_offset, std::move(on_done));
}

result<upload_ticket> uploader::fill_zero(device_buffer& dst, std::size_t offset_bytes, std::size_t size_bytes) {
  assert(state_ && "fill_zero on a moved-from uploader");
  TZ_CHECK(check_range(size_bytes, dst, offset_bytes, state_->device));
  return enqueue(stream_work{{}, offset_bytes, size_bytes}, dst, size_bytes, offset_bytes, upload_callback());
}

result<upload_ticket> uploader::enqueue(const stream_work& work, device_buffer& dst, std::size_t size_bytes,
                                        std::size_t offset_bytes, upload_callback on_done) {
  state& s = *state_;
  const unsigned index = s.next_stream.fetch_add(1, std::memory_order_relaxed) % s.streams.size();
  cudaStream_t stream = s.streams[index];
  upload_ticket ticket;
  ticket.device_ = s.device;
  ticket.stream_ = static_cast<int>(index);
  ticket.size_bytes_ = size_bytes;
  ticket.offset_bytes_ = offset_bytes;
  auto what = [&] { return describe_upload(size_bytes, offset_bytes, ticket.stream_); };

  TZ_TRY(scope, detail::device_scope::enter(s.device, what()));
  std::lock_guard contiguous(*s.enqueue_mutexes[index]);
  cudaError_t rc = cudaSuccess;
  cudaEvent_t event = nullptr;
  if (!on_done) {  // with a callback the outcome goes there: no event of the ticket's own
    rc = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (rc != cudaSuccess) return failure("cudaEventCreateWithFlags", rc, s.device, what());
    ticket.event_ = event;  // from here the ticket's destructor destroys it on every path
  }
  auto* base = static_cast<std::byte*>(dst.data());
  for (const upload_piece& p : work.pieces) {
    if (p.host.empty()) continue;
    rc = cudaMemcpyAsync(base + p.offset_bytes, p.host.data(), p.host.size(), cudaMemcpyHostToDevice, stream);
    if (rc != cudaSuccess) return failure("cudaMemcpyAsync", rc, s.device, what());
  }
  if (work.zero_bytes > 0) {
    rc = cudaMemsetAsync(base + work.zero_offset_bytes, 0, work.zero_bytes, stream);
    if (rc != cudaSuccess) return failure("cudaMemsetAsync", rc, s.device, what());
  }
  if (work.after != nullptr) {
    auto extra = (*work.after)(stream, static_cast<int>(index));
    if (!extra) {  // reported once the stream has passed the copies, which still read the host bytes
      on_done = [inner = std::move(on_done), e = extra.error()](result<void>) { inner(e); };
    }
  }
  if (on_done) {
    TZ_CHECK(s.lanes[index]->add(stream, on_done, size_bytes, offset_bytes));
  } else {
    rc = cudaEventRecord(event, stream);
    if (rc != cudaSuccess) return failure("cudaEventRecord", rc, s.device, what());
  }
  return ticket;
}

bool uploader::done(const upload_ticket& ticket) const noexcept {
  if (ticket.empty()) return true;
  return cudaEventQuery(static_cast<cudaEvent_t>(ticket.event_)) != cudaErrorNotReady;
}

result<void> uploader::wait(const upload_ticket& ticket) const {
  if (ticket.empty()) return {};
  cudaError_t rc = cudaEventSynchronize(static_cast<cudaEvent_t>(ticket.event_));
  if (rc != cudaSuccess) {
    return failure("cudaMemcpyAsync", rc, ticket.device_,
                   describe_upload(ticket.size_bytes_, ticket.offset_bytes_, ticket.stream_) +
                       ", reported by cudaEventSynchronize");
  }
  return {};
}

result<void> uploader::synchronize() {
  assert(state_ && "synchronize on a moved-from uploader");
  state& s = *state_;
  TZ_TRY(scope, detail::device_scope::enter(s.device, "synchronizing an uploader"));
  result<void> first;
  for (std::size_t i = 0; i < s.streams.size(); ++i) {
    cudaError_t rc = cudaStreamSynchronize(s.streams[i]);
    if (rc != cudaSuccess && first) {
      first = failure("cudaStreamSynchronize", rc, s.device, "stream " + std::to_string(i) + " of an uploader");
    }
  }
  return first;
}

void upload_ticket::release() noexcept {
  // Destroying an event whose work is still pending is allowed: CUDA frees it once it completes.
  if (event_ != nullptr) static_cast<void>(cudaEventDestroy(static_cast<cudaEvent_t>(event_)));
  event_ = nullptr;
}

}  // namespace tz::cuda

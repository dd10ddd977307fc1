// _C.Stream: tensors as they land. One load runs on a thread of its own with the engine's
// on_tensor_ready; each tensor it hands over waits in a queue until Python takes it (next()), as a
// byte view (host) or a DLPack capsule (device) that keeps the load's memory alive, also after a
// load that failed later.
#include "common.hpp"
#include "keys.hpp"
#include "partial.hpp"

#include "tz/cuda/cuda.hpp"
#include "tz/engine/device_load.hpp"
#include "tz/engine/load_trace.hpp"
#include "tz/engine/loader.hpp"

#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

namespace tz::py {

namespace {

struct ready_item {
  std::size_t index = 0;  // in the reader's index
  std::span<const std::byte> host;
  void* device_address = nullptr;
  std::uint64_t size_bytes = 0;
  std::shared_ptr<const void> owner;
};

class stream_handle {
 public:
  stream_handle(std::shared_ptr<scheduler> sched, loader opened) : sched_(std::move(sched)), opened_(std::move(opened)) {}
  ~stream_handle() {
    if (worker_.joinable()) worker_.join();  // the load cannot be cut short: it ends on its own
  }

  // Starts the load of `which` (host memory when device < 0) on a thread of its own.
  void start(std::vector<std::size_t> which, load_options o, int device, std::optional<std::string> trace) {
    device_ = device;
    o.on_tensor_ready = [this, base = opened_.index().tensors.data()](const tensor_ready& r) {
      ready_item item{static_cast<std::size_t>(r.entry - base), r.host, r.device_address, r.entry->deserialized_bytes,
                      r.owner};
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(item));
      ready_.notify_all();
    };
    if (trace && !trace->empty()) o.trace = std::make_shared<load_trace>();
    worker_ = std::thread([this, which = std::move(which), o = std::move(o), trace]() mutable {
      auto ran = run(std::move(which), o);
      if (ran && o.trace) ran = o.trace->write(*trace);
      else if (o.trace) static_cast<void>(o.trace->write(*trace));  // the load's own error is the one raised
      std::lock_guard lock(mutex_);
      if (!ran) failed_ = ran.error();
      finished_ = true;
      ready_.notify_all();
    });
  }

  // The next tensor's position (handover order), None once every tensor was taken; raises the
  // load's error once everything it handed over was taken. Waits at most timeout_s (None: no limit).
  std::optional<std::size_t> next(std::optional<double> timeout_s) {
    std::unique_lock lock(mutex_);
    auto arrived = [this] { return !queue_.empty() || finished_; };
    if (timeout_s) {
      if (!ready_.wait_for(lock, std::chrono::duration<double>(*timeout_s), arrived))
        throw pyb::value_error("Stream.next(): no tensor within the timeout");  // raised with the GIL back
    } else {
      ready_.wait(lock, arrived);
    }
    if (!queue_.empty()) {
      taken_.push_back(std::move(queue_.front()));
      queue_.pop_front();
      return taken_.size() - 1;
    }
    if (failed_) raise_error(*failed_);
    return std::nullopt;
  }

  const ready_item& item(std::size_t pos) const {
    if (pos >= taken_.size()) throw pyb::index_error("Stream: position not handed over yet");
    return taken_[pos];
  }
  int device() const noexcept { return device_; }
  std::uint64_t bytes_taken() const noexcept {
    std::uint64_t n = 0;
    for (const auto& it : taken_) n += it.size_bytes;
    return n;
  }
  const load_timings& timings() const noexcept { return timings_; }

 private:
  result<void> run(std::vector<std::size_t> which, const load_options& o) {
    try {
      if (device_ < 0) {
        TZ_TRY(loaded, opened_.load(*sched_, std::move(which), o));
        timings_ = loaded.timings();
        return {};
      }
      device_load_options d;
      static_cast<load_common_options&>(d) = o;  // the ring keeps its defaults
      TZ_TRY(ctx, device_context::shared(device_));
      TZ_TRY(loaded, load_to_device(*sched_, *ctx, opened_, std::move(which), d));
      timings_ = loaded.timings();
      return {};
    } catch (...) {
      return make_error(errc::io, opened_.source().name() + ": " + describe_exception(std::current_exception()));
    }
  }

  std::shared_ptr<scheduler> sched_;
  loader opened_;  // a copy: shares the reader's index and source
  int device_ = -1;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<ready_item> queue_;
  std::vector<ready_item> taken_;  // by position; only next() (the GIL holder's) appends
  bool finished_ = false;
  std::optional<error> failed_;
  load_timings timings_;  // set before finished_
};

}  // namespace

void register_stream(pyb::module_& m) {
  pyb::class_<stream_handle, std::shared_ptr<stream_handle>>(m, "Stream", "One load's tensors as they land.")
      .def(
          "next",
          [](stream_handle& s, std::optional<double> timeout_s) {
            pyb::gil_scoped_release release;
            return s.next(timeout_s);
          },
          pyb::arg("timeout_s") = pyb::none(),
          "The next ready tensor's position (waits for it); None once all were taken; raises the "
          "load's error after the tensors it handed over.")
      .def("index", [](const stream_handle& s, std::size_t pos) { return s.item(pos).index; }, pyb::arg("pos"))
      .def(
          "buffer",
          [](const stream_handle& s, std::size_t pos) {
            const auto& it = s.item(pos);
            if (s.device() >= 0) throw pyb::value_error("buffer(): this load is on a CUDA device; use dlpack()");
            return make_block(it.owner, const_cast<std::byte*>(it.host.data()), it.host.size());
          },
          pyb::arg("pos"))
      .def(
          "dlpack",
          [](const stream_handle& s, std::size_t pos, bool typed) -> pyb::object {
            const auto& it = s.item(pos);
            if (s.device() < 0) throw pyb::value_error("dlpack(): this load is in host memory; use buffer()");
            if (typed) return pyb::none();  // the bytes: the caller views them as the entry's dtype
            const std::int64_t shape[1] = {static_cast<std::int64_t>(it.size_bytes)};
            auto t = take(cuda::to_dlpack_cuda(it.device_address, s.device(), DLDataType{kDLUInt, 8, 1}, std::span<const std::int64_t>(shape), std::const_pointer_cast<void>(it.owner)));
            return dltensor_capsule(std::move(t));
          },
          pyb::arg("pos"), pyb::arg("typed") = false)
      .def_property_readonly("timings", [](const stream_handle& s) { return timings_dict(s.timings()); })
      .def_property_readonly("device", &stream_handle::device)
      .def_property_readonly("bytes", &stream_handle::bytes_taken);

  m.def(
      "stream",
      [](pyb::handle reader, std::vector<std::size_t> which, bool verify, unsigned readers,
         std::shared_ptr<decryption_keys> keys, int device, std::optional<std::string> trace, bool in_file_order) {
        auto [sched, l] = reader_loader(reader);
        const auto n = l->index().tensors.size();
        for (auto i : which)
          if (i >= n) throw pyb::index_error("stream(): tensor index " + std::to_string(i) + " out of range");
        load_options o;
        o.verify = verify;
        o.readers = readers;
        o.ready_in_file_order = in_file_order;
        if (keys) o.decryption = keys->decryption;
        auto s = std::make_shared<stream_handle>(sched, *l);
        s->start(std::move(which), std::move(o), device, std::move(trace));
        return s;
      },
      pyb::arg("reader"), pyb::arg("indices"), pyb::kw_only(), pyb::arg("verify") = false, pyb::arg("readers") = 0u,
      pyb::arg("decryption") = pyb::none(), pyb::arg("device") = -1, pyb::arg("trace") = pyb::none(),
      pyb::arg("in_file_order") = true,
      "Starts loading the tensors at `indices` of `reader` (host memory, or CUDA device `device`) and "
      "returns a Stream that hands each over as it lands.");
}

}  // namespace tz::py

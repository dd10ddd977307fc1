// Tests of the CUDA stage. Suite "host" needs no GPU (CTest entry cuda_test_host; it also checks that
// everything says so cleanly without one); suite "gpu" needs a CUDA device and is skipped (exit 77)
// before any case runs where there is none (CTest entry cuda_test).
#include "tz/cuda/cuda.hpp"
#include "tz/cuda/dlpack.hpp"

#include "cuda_device.hpp"
#include "requirements.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

using namespace tz::cuda;

// doctest cannot print a tz::result, so cases check these and see the error text on failure.
template <class T>
bool ok(const tz::result<T>& r) {
  if (!r) MESSAGE("unexpected error: " << r.error().message);
  return r.has_value();
}

template <class T>
bool failed(const tz::result<T>& r) {
  return r.has_error();
}

// Checks the no-GPU contract: device_count() is 0 and allocations fail with errc::no_device.
void check_no_gpu_behaviour() {
  auto count = device_count();
  REQUIRE(ok(count));
  REQUIRE(*count == 0);
  REQUIRE_FALSE(available());
  auto pinned = alloc_pinned(4096);
  REQUIRE(failed(pinned));
  REQUIRE(pinned.error().code == tz::errc::no_device);
  auto device = alloc_device(0, 4096);
  REQUIRE(failed(device));
  REQUIRE(device.error().code == tz::errc::no_device);
  REQUIRE(device.error().message.find("cuda:0") != std::string::npos);
  auto up = uploader::create(0);
  REQUIRE(failed(up));
  REQUIRE(up.error().code == tz::errc::no_device);
}

const tz_test::suite_needs gpu_needs_a_device{"gpu", "a CUDA device", tz_test::cuda_device_absent};

// A pattern where every byte depends on its absolute offset, so misplaced pieces are caught.
std::byte pattern_at(std::size_t offset, unsigned seed) {
  return static_cast<std::byte>((offset * 2654435761u + seed + (offset >> 12)) & 0xFF);
}

void fill_pattern(std::span<std::byte> bytes, std::size_t base_offset, unsigned seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = pattern_at(base_offset + i, seed);
}

// Index of the first byte of `bytes` that differs from the pattern, or bytes.size().
std::size_t first_mismatch(std::span<const std::byte> bytes, unsigned seed) {
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != pattern_at(i, seed)) return i;
  }
  return bytes.size();
}

std::vector<std::byte> download_all(const device_buffer& src) {
  std::vector<std::byte> out(src.size_bytes());
  auto r = download(src, 0, out);
  REQUIRE(ok(r));
  return out;
}

constexpr std::size_t mib = std::size_t{1} << 20;

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("device 0 is counted and described") {
    auto count = device_count();
    REQUIRE(ok(count));
    CHECK(*count >= 1);
    auto info = describe_device(0);
    REQUIRE(ok(info));
    MESSAGE("device 0: " << info->name << ", " << info->free_bytes / mib << " MiB free of "
                         << info->total_bytes / mib);
    CHECK(info->total_bytes > 0);
  }

  TEST_CASE("pinned memory is allocated, writable, movable and freed") {
    auto buffer = alloc_pinned(8 * mib);
    REQUIRE(ok(buffer));
    REQUIRE(buffer->size_bytes() == 8 * mib);
    CHECK_FALSE(buffer->registered());
    fill_pattern(buffer->bytes(), 0, 1);
    pinned_buffer moved = std::move(*buffer);
    CHECK(buffer->empty());
    CHECK(first_mismatch(moved.bytes(), 1) == moved.size_bytes());

    std::vector<std::byte> caller(4 * mib);
    auto registered = register_pinned(caller);
    REQUIRE(ok(registered));
    CHECK(registered->registered());
    CHECK(registered->data() == caller.data());
    auto empty = alloc_pinned(0);
    REQUIRE(ok(empty));
    CHECK(empty->empty());
  }

  TEST_CASE("device memory knows its device and a bad device index is an error naming it") {
    auto buffer = alloc_device(0, 16 * mib);
    REQUIRE(ok(buffer));
    CHECK(buffer->device() == 0);
    CHECK(buffer->size_bytes() == 16 * mib);
    CHECK(buffer->data() != nullptr);

    const int missing = *device_count();
    auto bad = alloc_device(missing, 4096);
    REQUIRE(failed(bad));
    CHECK(bad.error().code == tz::errc::no_device);
    CHECK(bad.error().message.find("cuda:" + std::to_string(missing)) != std::string::npos);
    auto negative = uploader::create(-1);
    REQUIRE(failed(negative));
    CHECK(negative.error().code == tz::errc::no_device);
    auto no_streams = uploader::create(0, 0);
    REQUIRE(failed(no_streams));
    CHECK(no_streams.error().code == tz::errc::invalid_argument);
  }

  TEST_CASE("a known pattern uploaded on several streams comes back byte for byte") {
    constexpr std::size_t total = 64 * mib, piece = 4 * mib;
    auto host = alloc_pinned(total).value();
    fill_pattern(host.bytes(), 0, 7);
    auto device = alloc_device(0, total).value();
    auto up = uploader::create(0, 4).value();
    std::vector<upload_ticket> tickets;
    for (std::size_t offset = 0; offset < total; offset += piece) {
      tickets.push_back(up.upload(host.bytes().subspan(offset, piece), device, offset).value());
    }
    std::vector<int> streams_used;
    for (auto& ticket : tickets) {
      auto r = up.wait(ticket);
      REQUIRE(ok(r));
      CHECK(up.done(ticket));
      streams_used.push_back(ticket.stream_index());
    }
    std::sort(streams_used.begin(), streams_used.end());
    streams_used.erase(std::unique(streams_used.begin(), streams_used.end()), streams_used.end());
    CHECK(streams_used.size() == 4);
    auto back = download_all(device);
    CHECK(first_mismatch(back, 7) == total);
  }

  TEST_CASE("thousands of small uploads land at their offsets") {
    constexpr std::size_t count = 4096, piece = 1024, total = count * piece;
    auto host = alloc_pinned(total).value();
    fill_pattern(host.bytes(), 0, 11);
    auto device = alloc_device(0, total).value();
    auto up = uploader::create(0, 8).value();
    std::vector<upload_ticket> tickets;
    tickets.reserve(count);
    // Reverse order, so that landing at the right offset is not an accident of issue order.
    for (std::size_t i = count; i-- > 0;) {
      tickets.push_back(up.upload(host.bytes().subspan(i * piece, piece), device, i * piece).value());
    }
    auto r = up.synchronize();
    REQUIRE(ok(r));
    CHECK(std::all_of(tickets.begin(), tickets.end(), [&](const upload_ticket& t) { return up.done(t); }));
    auto back = download_all(device);
    CHECK(first_mismatch(back, 11) == total);
  }

  TEST_CASE("an upload larger than the pinned buffers goes through them in pieces") {
    constexpr std::size_t total = 40 * mib + 12345, slot_size = 4 * mib;
    std::vector<std::byte> source(total);  // pageable, like a file read into ordinary memory
    fill_pattern(source, 0, 23);
    auto device = alloc_device(0, total).value();
    auto up = uploader::create(0, 2).value();
    // Two pinned slots in turn: refill one while the other is on the wire.
    pinned_buffer slots[2] = {alloc_pinned(slot_size).value(), alloc_pinned(slot_size).value()};
    upload_ticket in_flight[2];
    std::size_t pieces = 0;
    for (std::size_t offset = 0; offset < total; offset += slot_size, ++pieces) {
      const std::size_t n = std::min(slot_size, total - offset);
      const std::size_t slot = pieces % 2;
      auto r = up.wait(in_flight[slot]);  // the slot's previous copy must be done before refilling
      REQUIRE(ok(r));
      std::memcpy(slots[slot].data(), source.data() + offset, n);
      in_flight[slot] = up.upload(slots[slot].bytes().first(n), device, offset).value();
    }
    CHECK(pieces == 11);
    REQUIRE(ok(up.synchronize()));
    auto back = download_all(device);
    CHECK(first_mismatch(back, 23) == total);
  }

  TEST_CASE("completion callbacks run once per upload with the outcome") {
    constexpr int count = 64;
    constexpr std::size_t piece = 256 * 1024;
    auto host = alloc_pinned(count * piece).value();
    fill_pattern(host.bytes(), 0, 3);
    auto device = alloc_device(0, count * piece).value();
    auto up = uploader::create(0, 4).value();
    std::mutex mutex;
    std::condition_variable cv;
    int completed = 0, failed = 0;
    for (int i = 0; i < count; ++i) {
      const std::size_t offset = static_cast<std::size_t>(i) * piece;
      // What an event loop would do: record and notify, nothing else.
      auto ticket = up.upload(host.bytes().subspan(offset, piece), device, offset, [&](tz::result<void> outcome) {
        std::lock_guard lock(mutex);
        ++completed;
        if (!outcome) ++failed;
        cv.notify_one();
      });
      REQUIRE(ok(ticket));  // dropped at once: the callback still fires
    }
    std::unique_lock lock(mutex);
    const bool all = cv.wait_for(lock, std::chrono::seconds(30), [&] { return completed == count; });
    CHECK(all);
    CHECK(failed == 0);
    lock.unlock();
    REQUIRE(ok(up.synchronize()));
    CHECK(completed == count);
    CHECK(first_mismatch(download_all(device), 3) == count * piece);
  }

  TEST_CASE("destroying an uploader reports every pending completion first, and tickets with callbacks are empty") {
    constexpr int count = 48;
    constexpr std::size_t piece = 1 << 20;
    auto host = alloc_pinned(count * piece).value();
    fill_pattern(host.bytes(), 0, 5);
    auto device = alloc_device(0, count * piece).value();
    std::atomic<int> completed{0}, failed{0};
    {
      auto up = uploader::create(0, 3).value();
      for (int i = 0; i < count; ++i) {
        const std::size_t offset = static_cast<std::size_t>(i) * piece;
        auto ticket = up.upload(host.bytes().subspan(offset, piece), device, offset, [&](tz::result<void> outcome) {
          if (!outcome) ++failed;
          ++completed;
        });
        REQUIRE(ok(ticket));
        CHECK(ticket.value().empty());  // the outcome goes to the callback alone
        CHECK(up.done(ticket.value()));
      }
    }  // no wait: the destructor must drain every lane
    CHECK(completed.load() == count);
    CHECK(failed.load() == 0);
    CHECK(first_mismatch(download_all(device), 5) == count * piece);
  }

  TEST_CASE("uploads outside the destination are refused before reaching CUDA") {
    auto host = alloc_pinned(8192).value();
    auto device = alloc_device(0, 4096).value();
    auto up = uploader::create(0).value();
    auto too_long = up.upload(host.bytes(), device, 0);
    REQUIRE(failed(too_long));
    CHECK(too_long.error().code == tz::errc::invalid_argument);
    CHECK(too_long.error().message.find("8192 bytes") != std::string::npos);
    auto past_end = up.upload(host.bytes().first(1), device, 4096);
    REQUIRE(failed(past_end));
    device_buffer moved_from;
    auto wrong_device = up.upload(host.bytes().first(1), moved_from, 0);
    REQUIRE(failed(wrong_device));
    CHECK(wrong_device.error().code == tz::errc::invalid_argument);
    std::vector<std::byte> out(4097);
    auto bad_download = download(device, 0, out);
    REQUIRE(failed(bad_download));
    CHECK(bad_download.error().code == tz::errc::invalid_argument);
    upload_ticket empty;
    CHECK(up.done(empty));
    CHECK(ok(up.wait(empty)));
  }

  TEST_CASE("a device buffer exported through DLPack stays alive until the consumer deletes it") {
    auto buffer = std::make_shared<device_buffer>(alloc_device(0, 1024 * sizeof(float)).value());
    const std::int64_t shape[] = {32, 32};
    auto tensor = to_dlpack_cuda(buffer->data(), 0, DLDataType{kDLFloat, 32, 1}, shape, buffer);
    REQUIRE(ok(tensor));
    CHECK((*tensor)->dl_tensor.device.device_type == kDLCUDA);
    CHECK((*tensor)->dl_tensor.device.device_id == 0);
    CHECK(buffer.use_count() == 2);
    tensor->reset();
    CHECK(buffer.use_count() == 1);
  }

  TEST_CASE("allocating and freeing repeatedly leaks no device memory") {
    {  // warm up: the context, streams and first allocations take memory once
      auto up = uploader::create(0).value();
      auto warm = alloc_device(0, 64 * mib).value();
    }
    const std::size_t free_before = describe_device(0).value().free_bytes;
    for (int round = 0; round < 20; ++round) {
      auto up = uploader::create(0, 4).value();
      auto device = alloc_device(0, 64 * mib).value();
      auto host = alloc_pinned(mib).value();
      auto ticket = up.upload(host.bytes(), device, 0).value();
      REQUIRE(ok(up.wait(ticket)));
    }
    const std::size_t free_after = describe_device(0).value().free_bytes;
    CHECK(free_after == free_before);
  }
}

TEST_SUITE("host") {
  TEST_CASE("the build flag matches the implementation that was linked") {
    CHECK(built_with_cuda() == static_cast<bool>(TZ_HAVE_CUDA));
    auto count = device_count();
    REQUIRE(ok(count));
    CHECK(*count >= 0);
    if (!built_with_cuda()) CHECK(*count == 0);
  }

  TEST_CASE("a device that is not there gives no_device from every call, with a message naming it") {
    // Without a GPU that is cuda:0 and nothing works; with one (or the emulation), one past the last.
    const int missing = device_count().value();
    if (!available()) check_no_gpu_behaviour();
    auto buffer = alloc_device(missing, 4096);
    REQUIRE(failed(buffer));
    CHECK(buffer.error().code == tz::errc::no_device);
    CHECK(buffer.error().message.find("cuda:" + std::to_string(missing)) != std::string::npos);
    auto up = uploader::create(missing);
    REQUIRE(failed(up));
    CHECK(up.error().code == tz::errc::no_device);
    auto info = describe_device(missing);
    REQUIRE(failed(info));
    CHECK(info.error().code == tz::errc::no_device);
    CHECK_FALSE(info.error().message.empty());
    auto registered = register_pinned({});
    if (built_with_cuda()) {
      CHECK(ok(registered));  // nothing to pin: no CUDA call is made
    } else {
      CHECK(registered.error().code == tz::errc::no_device);
    }
    device_buffer none;
    std::vector<std::byte> out(16);
    CHECK(failed(download(none, 0, out)));
  }

  TEST_CASE("device names parse as cuda or cuda:N and nothing else") {
    CHECK(parse_device("cuda").value() == 0);
    CHECK(parse_device("cuda:0").value() == 0);
    CHECK(parse_device("cuda:7").value() == 7);
    for (const char* bad : {"", "cpu", "cuda:", "cuda:-1", "cuda:1x", "cuda:+1", "CUDA:0", "cuda:99999999999", "cuda0"}) {
      auto r = parse_device(bad);
      CHECK_MESSAGE(!r, bad);
      if (!r) {
        CHECK(r.error().code == tz::errc::invalid_argument);
        CHECK(r.error().message.find(std::string("'") + bad + "'") != std::string::npos);
      }
    }
  }

  TEST_CASE("a host tensor exported through DLPack describes the memory and keeps its owner alive") {
    auto storage = std::make_shared<std::vector<std::uint16_t>>(2 * 3 * 4);
    const std::int64_t shape[] = {2, 3, 4};
    auto tensor = to_dlpack_host(storage->data(), DLDataType{kDLBfloat, 16, 1}, shape, storage);
    REQUIRE(ok(tensor));
    const DLTensor& t = (*tensor)->dl_tensor;
    CHECK(t.data == storage->data());
    CHECK(t.device.device_type == kDLCPU);
    CHECK(t.device.device_id == 0);
    CHECK(t.ndim == 3);
    CHECK(t.dtype.code == kDLBfloat);
    CHECK(t.dtype.bits == 16);
    CHECK(t.dtype.lanes == 1);
    CHECK(t.shape[0] == 2);
    CHECK(t.shape[1] == 3);
    CHECK(t.shape[2] == 4);
    CHECK(t.strides[0] == 12);
    CHECK(t.strides[1] == 4);
    CHECK(t.strides[2] == 1);
    CHECK(t.byte_offset == 0);
    CHECK(storage.use_count() == 2);

    // A consumer takes it over and later calls the deleter, as PyTorch's from_dlpack does.
    DLManagedTensor* handed_over = tensor->release();
    CHECK(storage.use_count() == 2);
    handed_over->deleter(handed_over);
    CHECK(storage.use_count() == 1);
  }

  TEST_CASE("a scalar and an empty tensor export, with no data needed for zero elements") {
    float value = 1.5f;
    auto scalar = to_dlpack_host(&value, DLDataType{kDLFloat, 32, 1}, {}, nullptr);
    REQUIRE(ok(scalar));
    CHECK((*scalar)->dl_tensor.ndim == 0);
    CHECK((*scalar)->dl_tensor.shape == nullptr);
    const std::int64_t empty_shape[] = {0, 5};
    auto empty = to_dlpack_host(nullptr, DLDataType{kDLInt, 8, 1}, empty_shape, nullptr);
    REQUIRE(ok(empty));
    CHECK((*empty)->dl_tensor.shape[1] == 5);
  }

  TEST_CASE("impossible DLPack exports are refused with the reason") {
    std::byte byte{};
    const std::int64_t negative[] = {2, -1};
    auto r1 = to_dlpack_host(&byte, DLDataType{kDLUInt, 8, 1}, negative, nullptr);
    REQUIRE(failed(r1));
    CHECK(r1.error().code == tz::errc::invalid_argument);
    CHECK(r1.error().message.find("dimension 1") != std::string::npos);
    const std::int64_t one[] = {1};
    CHECK(failed(to_dlpack_host(&byte, DLDataType{kDLUInt, 0, 1}, one, nullptr)));
    CHECK(failed(to_dlpack_host(&byte, DLDataType{kDLUInt, 8, 0}, one, nullptr)));
    CHECK(failed(to_dlpack_host(nullptr, DLDataType{kDLUInt, 8, 1}, one, nullptr)));
    std::vector<std::int64_t> too_many(dlpack_ndim_max + 1, 1);
    CHECK(failed(to_dlpack_host(&byte, DLDataType{kDLUInt, 8, 1}, too_many, nullptr)));
    auto cuda_tensor = to_dlpack_cuda(&byte, 0, DLDataType{kDLUInt, 8, 1}, one, nullptr);
    if (!built_with_cuda()) {
      REQUIRE(failed(cuda_tensor));
      CHECK(cuda_tensor.error().code == tz::errc::no_device);
    }
  }
}

// The secretbox kernels on the CUDA emulation: each launch becomes one operation on its stream that
// opens every job's chunk in the emulated device memory with libsodium and writes its flag, so the
// device sink's decryption (ciphertext uploaded as stored, opened behind the copies, flags read
// back) runs in CI without a GPU. The kernels' own arithmetic is tested against libsodium on the
// host (secretbox_test) and on a GPU (secretbox_gpu_test).
#include "tz/cuda/secretbox.hpp"
#include "tz/cuda_emulation.hpp"

#include <sodium.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace tz::cuda {

namespace {
std::atomic<std::uint64_t> launches_to_skip{0};
}  // namespace

void emulation::skip_secretbox_launches(std::uint64_t n) { launches_to_skip.store(n); }

bool secretbox_kernels_available() noexcept { return true; }

result<void> launch_secretbox_open(std::span<const secretbox_job> jobs, std::span<const std::uint8_t, 32> key,
                                   std::uint8_t* device_flags, void* device_scratch, void* cuda_stream) {
  if (jobs.empty()) return {};
  if (device_flags == nullptr || device_scratch == nullptr)
    return make_error(errc::invalid_argument, "secretbox open: null flags or scratch");
  for (auto left = launches_to_skip.load(); left > 0;) {
    if (launches_to_skip.compare_exchange_weak(left, left - 1)) return {};
  }
  std::vector<secretbox_job> copy(jobs.begin(), jobs.end());  // read during the call only, as the kernels'
  std::array<std::uint8_t, 32> k{};
  std::copy(key.begin(), key.end(), k.begin());
  // Two operations, as the kernels are two launches: the first leaves a token in the scratch (the
  // Poly1305 partial sums), the second opens the chunks only if the token is still there. Work of
  // another launch enqueued between them on this stream overwrites it, and the chunks then fail
  // their MAC, as they do on a GPU.
  static std::atomic<std::uint64_t> tokens{1};
  const std::uint64_t token = tokens.fetch_add(1);
  auto* scratch = device_scratch;
  auto partial = [scratch, token] {
    if (auto* at = emulation::device_bytes(scratch, sizeof token)) std::memcpy(at, &token, sizeof token);
  };
  auto open = [copy = std::move(copy), k, device_flags, scratch, token] {
    std::uint64_t seen = 0;
    if (auto* at = emulation::device_bytes(scratch, sizeof seen)) std::memcpy(&seen, at, sizeof seen);
    for (std::size_t i = 0; i < copy.size(); ++i) {
      const auto& j = copy[i];
      auto* data = reinterpret_cast<unsigned char*>(emulation::device_bytes(j.device_data, j.size_bytes));
      auto* flag = reinterpret_cast<std::uint8_t*>(emulation::device_bytes(device_flags + i, 1));
      if (flag == nullptr) continue;  // not device memory: the caller broke the contract
      *flag = seen == token && data != nullptr &&
              crypto_secretbox_open_detached(data, data, j.mac.data(), j.size_bytes, j.nonce.data(), k.data()) == 0;
    }
  };
  if (!emulation::enqueue_work(cuda_stream, std::move(partial)))
    return make_error(errc::cuda, "secretbox open: unknown stream (emulation)");
  std::this_thread::yield();  // let another thread's launch in between, if the caller allows it
  if (!emulation::enqueue_work(cuda_stream, std::move(open)))
    return make_error(errc::cuda, "secretbox open: unknown stream (emulation)");
  return {};
}

}  // namespace tz::cuda

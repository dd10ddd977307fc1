// The secretbox kernels on the CUDA emulation: each launch becomes one operation on its stream that
// opens every job's chunk in the emulated device memory with libsodium and writes its flag, so the
// device sink's decryption (ciphertext uploaded as stored, opened behind the copies, flags read
// back) runs in CI without a GPU. The kernels' own arithmetic is tested against libsodium on the
// host (secretbox_test) and on a GPU (secretbox_gpu_test).
#include "tz/cuda/secretbox.hpp"
#include "tz/cuda_emulation.hpp"

#include <sodium.h>

#include <string>
#include <vector>

namespace tz::cuda {

bool secretbox_kernels_available() noexcept { return true; }

result<void> launch_secretbox_open(std::span<const secretbox_job> jobs, std::span<const std::uint8_t, 32> key,
                                   std::uint8_t* device_flags, void* device_scratch, void* cuda_stream) {
  if (jobs.empty()) return {};
  if (device_flags == nullptr || device_scratch == nullptr)
    return make_error(errc::invalid_argument, "secretbox open: null flags or scratch");
  std::vector<secretbox_job> copy(jobs.begin(), jobs.end());  // read during the call only, as the kernels'
  std::array<std::uint8_t, 32> k{};
  std::copy(key.begin(), key.end(), k.begin());
  auto work = [copy = std::move(copy), k, device_flags] {
    for (std::size_t i = 0; i < copy.size(); ++i) {
      const auto& j = copy[i];
      auto* data = reinterpret_cast<unsigned char*>(emulation::device_bytes(j.device_data, j.size_bytes));
      auto* flag = reinterpret_cast<std::uint8_t*>(emulation::device_bytes(device_flags + i, 1));
      if (flag == nullptr) continue;  // not device memory: the caller broke the contract
      *flag = data != nullptr &&
              crypto_secretbox_open_detached(data, data, j.mac.data(), j.size_bytes, j.nonce.data(), k.data()) == 0;
    }
  };
  if (!emulation::enqueue_work(cuda_stream, std::move(work)))
    return make_error(errc::cuda, "secretbox open: unknown stream (emulation)");
  return {};
}

}  // namespace tz::cuda

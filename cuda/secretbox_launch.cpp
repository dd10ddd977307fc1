// The host side of the GPU secretbox-open: checks the jobs, derives each chunk's keys, launches.
#include "cuda_detail.hpp"
#include "secretbox_batch.hpp"
#include "tz/cuda/secretbox.hpp"

#include <algorithm>
#include <string>

namespace tz::cuda {

static_assert(secretbox_batch_max == sbox::batch_max && secretbox_scratch_bytes == sbox::scratch_bytes,
              "tz/cuda/secretbox.hpp and secretbox_math.hpp disagree");

namespace {

// Wipes key material from host memory; the volatile writes are not optimised away.
void wipe(void* data, std::size_t size_bytes) noexcept {
  auto* p = static_cast<volatile unsigned char*>(data);
  for (std::size_t i = 0; i < size_bytes; ++i) p[i] = 0;
}

result<void> check_jobs(std::span<const secretbox_job> jobs, const std::uint8_t* flags, const void* scratch) {
  const std::string what = "opening " + std::to_string(jobs.size()) + " encrypted chunk(s) on the GPU";
  if (flags == nullptr) return make_error(errc::invalid_argument, what + ": no device flag array");
  if (scratch == nullptr) return make_error(errc::invalid_argument, what + ": no device scratch");
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].device_data == nullptr && jobs[i].size_bytes != 0) {
      return make_error(errc::invalid_argument, what + ": chunk " + std::to_string(i) + " has " +
                                                    std::to_string(jobs[i].size_bytes) + " bytes at a null address");
    }
  }
  return {};
}

// Fills `batch` with jobs[first, first + count): device addresses, keys and expected tags.
void fill_batch(detail::secretbox_batch& batch, std::span<const secretbox_job> jobs,
                std::span<const std::uint8_t, 32> key) {
  std::uint64_t length_max = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    detail::secretbox_chunk& chunk = batch.chunks[i];
    chunk.data = static_cast<std::uint8_t*>(jobs[i].device_data);
    chunk.size_bytes = jobs[i].size_bytes;
    chunk.key = sbox::derive_chunk_key(key.data(), jobs[i].nonce.data());
    for (int w = 0; w < 4; ++w) chunk.mac[w] = sbox::load_le32(jobs[i].mac.data() + 4 * w);
    length_max = std::max<std::uint64_t>(length_max, jobs[i].size_bytes);
  }
  batch.count = static_cast<std::uint32_t>(jobs.size());
  batch.shape = sbox::shape_for(length_max);
}

}  // namespace

bool secretbox_kernels_available() noexcept { return true; }

result<void> launch_secretbox_open(std::span<const secretbox_job> jobs, std::span<const std::uint8_t, 32> key,
                                   std::uint8_t* device_flags, void* device_scratch, void* cuda_stream) {
  if (jobs.empty()) return {};
  TZ_CHECK(check_jobs(jobs, device_flags, device_scratch));
  // Clear a stale error of an earlier call on this thread, so that what the launch returns is its own.
  static_cast<void>(cudaGetLastError());
  detail::secretbox_batch batch{};
  cudaError_t rc = cudaSuccess;
  std::size_t first = 0;
  // Later batches reuse the scratch: the stream orders them after the earlier ones.
  for (; first < jobs.size() && rc == cudaSuccess; first += secretbox_batch_max) {
    const auto part = jobs.subspan(first, std::min(secretbox_batch_max, jobs.size() - first));
    fill_batch(batch, part, key);
    rc = detail::enqueue_secretbox_batch(batch, device_flags + first, device_scratch,
                                         static_cast<cudaStream_t>(cuda_stream));
  }
  wipe(&batch, sizeof(batch));
  if (rc == cudaSuccess) return {};
  int device = -1;
  static_cast<void>(cudaGetDevice(&device));
  return detail::failure("secretbox kernel launch", rc, device,
                         "opening encrypted chunks " + std::to_string(first - secretbox_batch_max) + ".. of " +
                             std::to_string(jobs.size()));
}

}  // namespace tz::cuda

// The CRC-32 kernel on the CUDA emulation: the real launcher (cuda/crc32_launch.cpp: checks, the
// zeroing cudaMemsetAsync, batches of 64) calls this enqueue_crc32_batch, which queues one stream
// operation per batch running crc32_math.hpp's reference_job_crc on the emulated device bytes. So
// CI without a GPU runs the launcher and the kernel's decomposition (the same spans and terms);
// only the loads and the warp's XOR are the GPU's own (crc32_gpu_test).
#include "crc32_batch.hpp"
#include "state.hpp"

#include <cstring>

namespace tz::cuda::detail {

namespace {

// One job, as the kernel's CTAs would compute it, XORed into its result word as their atomics do
// (so a result the launcher did not zero keeps cudaMalloc's garbage and the tests see it). False
// when the job or its result is not device memory: a GPU would fault on that read.
bool run_job(const crc32_batch_job& job, std::uint32_t* result) {
  std::byte* out = emulation::device_bytes(result, sizeof(std::uint32_t));
  const std::byte* in = job.size_bytes == 0 ? nullptr : emulation::device_bytes(job.data, job.size_bytes);
  if (out == nullptr || (in == nullptr && job.size_bytes != 0)) return false;
  const std::uint32_t crc = crc::reference_job_crc(reinterpret_cast<const std::uint8_t*>(in), job.size_bytes);
  std::uint32_t word = 0;
  std::memcpy(&word, out, sizeof word);
  word ^= crc;
  std::memcpy(out, &word, sizeof word);
  return true;
}

}  // namespace

cudaError_t enqueue_crc32_batch(const crc32_batch& batch, std::uint32_t* results, cudaStream_t stream) {
  if (batch.ctas == 0 || batch.count == 0) return cudaSuccess;  // as the kernel's launcher: nothing to launch
  // The batch is copied into the operation, as kernel parameters are at the launch.
  auto kernel = [batch, results] {
    for (std::uint32_t i = 0; i < batch.count; ++i) {
      // A kernel reading outside device memory faults: the context's sticky error, as on a GPU,
      // seen at the caller's next synchronization. The other jobs' results are then undefined.
      if (!run_job(batch.jobs[i], results + i)) {
        tz_emulation::raise_sticky(cudaErrorIllegalAddress);
        return;
      }
    }
  };
  if (!emulation::enqueue_work(stream, std::move(kernel))) return tz_emulation::fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

}  // namespace tz::cuda::detail

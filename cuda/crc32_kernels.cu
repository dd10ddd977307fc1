// The CRC-32 kernel: one thread per 4 KiB span of a job, terms XORed into the job's result.
//
// Grid (ctas, jobs), 256 threads per CTA, one launch per batch of up to 64 jobs (crc32_math.hpp
// explains the decomposition). Each CTA first builds the slicing-by-8 tables in shared memory, one
// column per thread, and copies the x^(2^k) table beside them; each thread then hashes its span,
// multiplies the span's CRC by x^(8 * bytes after it), and the warp XORs its 32 terms into the
// result with one atomic. The launcher zeroed the results on the same stream before.
#include "crc32_batch.hpp"

#include <cstdint>

namespace tz::cuda::detail {
namespace {

using crc::threads_per_cta;
static_assert(threads_per_cta == 256, "one thread fills one of the 256 table columns");

// The standard CRC of one span at any address: bytes up to a 16-byte boundary, then one 128-bit
// read-only load per 16 bytes (two slicing-by-8 steps), then the tail bytes. Spans start at
// multiples of 4 KiB from the job, so in a 16-byte-aligned job the head is always empty.
__device__ std::uint32_t span_crc(const crc::crc_tables& tables, const std::uint8_t* p, std::uint64_t size_bytes) {
  std::uint64_t head = (16U - (reinterpret_cast<std::uintptr_t>(p) & 15U)) & 15U;
  if (head > size_bytes) head = size_bytes;
  std::uint32_t r = crc::update_bytes(tables, ~0U, p, head);
  p += head;
  size_bytes -= head;
  const auto* blocks = reinterpret_cast<const uint4*>(p);
  const std::uint64_t block_count = size_bytes / 16;
  for (std::uint64_t i = 0; i < block_count; ++i) {
    const uint4 w = __ldg(blocks + i);
    r = crc::update_word(tables, r, w.x, w.y);
    r = crc::update_word(tables, r, w.z, w.w);
  }
  return ~crc::update_bytes(tables, r, p + block_count * 16, size_bytes % 16);
}

__device__ std::uint32_t warp_xor(std::uint32_t x) {
  for (int offset = 16; offset > 0; offset /= 2) x ^= __shfl_xor_sync(0xffffffffU, x, offset);
  return x;
}

__global__ void __launch_bounds__(threads_per_cta) crc32_kernel(const crc32_batch batch, std::uint32_t* results) {
  // A copy, so that the job is read from the parameter space, not spilled.
  const crc32_batch_job job = batch.jobs[blockIdx.y];
  // Whole CTAs past the job's end leave at once; the condition is the same for all their threads.
  if (std::uint64_t{blockIdx.x} * crc::cta_bytes >= job.size_bytes) return;

  __shared__ crc::crc_tables tables;
  __shared__ std::uint32_t x2k[crc::x2k_count];
  crc::fill_table_column(tables, threadIdx.x);
  if (threadIdx.x < crc::x2k_count) x2k[threadIdx.x] = batch.x2k[threadIdx.x];
  __syncthreads();

  // Threads past the job's last span still take part in the warp's XOR, with a zero term.
  const std::uint64_t index = std::uint64_t{blockIdx.x} * threads_per_cta + threadIdx.x;
  std::uint32_t term = 0;
  if (index < crc::span_count(job.size_bytes)) {
    const crc::span s = crc::span_at(job.size_bytes, index);
    term = crc::contribution(x2k, span_crc(tables, job.data + s.offset_bytes, s.size_bytes), s.after_bytes);
  }
  term = warp_xor(term);
  if (threadIdx.x % 32 == 0 && term != 0) atomicXor(results + blockIdx.y, term);
}

}  // namespace

cudaError_t enqueue_crc32_batch(const crc32_batch& batch, std::uint32_t* results, cudaStream_t stream) {
  if (batch.ctas == 0 || batch.count == 0) return cudaSuccess;  // only empty jobs: their zeroes are written
  crc32_kernel<<<dim3(batch.ctas, batch.count), threads_per_cta, 0, stream>>>(batch, results);
  return cudaGetLastError();
}

}  // namespace tz::cuda::detail

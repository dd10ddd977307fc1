// The GPU secretbox-open: Poly1305 over each chunk's ciphertext in many lanes, then the keystream XOR.
//
// Two kernels per batch on the caller's stream, ordered by it:
//  1. poly1305_kernel, grid (poly_ctas, chunks): every thread is one Poly1305 lane of its chunk
//     (secretbox_math.hpp explains the lanes); a CTA sums its 256 lanes' shares and writes the
//     sum to the scratch. Consecutive threads read consecutive 16-byte blocks: coalesced loads.
//  2. open_kernel, grid (xor_ctas, chunks): each CTA sums its chunk's CTA partials, finishes and
//     compares the tag (CTA 0 writes the flag), and only when it matches XORs the keystream in
//     place, one 64-byte XSalsa20 block per thread and step.
// Hashing completes before any byte is decrypted (the tag covers the ciphertext), and a chunk
// whose tag differs is left as ciphertext, as libsodium leaves it.
#include "secretbox_batch.hpp"

#include <cstdint>

namespace tz::cuda::detail {
namespace {

using sbox::fe;
using sbox::threads_per_cta;

__device__ bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15U) == 0; }

// Full blocks of a 16-byte-aligned chunk in one 128-bit load each; the partial last block byte by byte.
struct vector_block_loader {
  const std::uint8_t* message;
  std::uint64_t length_bytes;

  __host__ __device__ fe operator()(std::uint64_t index) const {
#if defined(__CUDA_ARCH__)
    if (index * 16 + 16 <= length_bytes) {
      const uint4 w = __ldg(reinterpret_cast<const uint4*>(message) + index);
      return sbox::fe_from_words(w.x, w.y, w.z, w.w, 1);
    }
#endif
    return sbox::byte_block_loader{message, length_bytes}(index);
  }
};

__device__ fe warp_sum(fe x) {
  for (int offset = 16; offset > 0; offset /= 2) {
    fe y;
    for (int i = 0; i < 5; ++i) y.v[i] = __shfl_down_sync(0xffffffffU, x.v[i], offset);
    x = sbox::fe_carry(sbox::fe_add(x, y));
  }
  return x;
}

// The sum mod p of every thread's x, valid in thread 0. Called at most once per kernel.
__device__ fe cta_sum(fe x) {
  constexpr unsigned warps = threads_per_cta / 32;
  __shared__ fe warp_totals[warps];
  x = warp_sum(x);
  const unsigned lane = threadIdx.x % 32;
  const unsigned warp = threadIdx.x / 32;
  if (lane == 0) warp_totals[warp] = x;
  __syncthreads();
  if (warp != 0) return x;
  return warp_sum(lane < warps ? warp_totals[lane] : sbox::fe_zero());
}

__global__ void __launch_bounds__(threads_per_cta) poly1305_kernel(const secretbox_batch batch,
                                                                    std::uint32_t* partials) {
  // A copy, so that the per-chunk parameters are read from the parameter space, not spilled.
  const secretbox_chunk chunk = batch.chunks[blockIdx.y];
  const unsigned count = batch.shape.table_count;
  __shared__ fe table[sbox::pow_table_max];
  if (threadIdx.x == 0) sbox::fe_pow_table(table, count, chunk.key.r);
  __syncthreads();

  const std::uint64_t lanes = batch.shape.lanes;
  const std::uint64_t lane = std::uint64_t{blockIdx.x} * threads_per_cta + threadIdx.x;
  const std::uint64_t blocks = sbox::poly_block_count(chunk.size_bytes);
  const fe r_lanes = table[count - 1];  // lanes is 2^(count - 1)
  fe share;
  if (aligned16(chunk.data)) {
    share = sbox::poly1305_lane(vector_block_loader{chunk.data, chunk.size_bytes}, blocks, lane, lanes, r_lanes,
                                table, count);
  } else {
    share = sbox::poly1305_lane(sbox::byte_block_loader{chunk.data, chunk.size_bytes}, blocks, lane, lanes,
                                r_lanes, table, count);
  }
  share = cta_sum(share);
  if (threadIdx.x == 0) {
    std::uint32_t* out = partials + (std::size_t{blockIdx.y} * sbox::poly_ctas_max + blockIdx.x) * 5;
    for (int i = 0; i < 5; ++i) out[i] = share.v[i];
  }
}

// XORs quarter q of keystream block `block` into the chunk: one 16-byte load and store when the
// chunk is aligned and the quarter lies wholly inside it, byte by byte at the edges.
__device__ void xor_quarter(std::uint8_t* data, std::uint64_t size_bytes, bool aligned, std::uint64_t block,
                            unsigned q, const std::uint32_t ks[16]) {
  const std::uint64_t stream_offset = block * 64 + q * 16;
  if (stream_offset < 32) return;  // the Poly1305 key
  const std::uint64_t first = stream_offset - 32;
  if (aligned && first + 16 <= size_bytes) {
    auto* p = reinterpret_cast<uint4*>(data + first);
    uint4 v = *p;
    v.x ^= ks[4 * q];
    v.y ^= ks[4 * q + 1];
    v.z ^= ks[4 * q + 2];
    v.w ^= ks[4 * q + 3];
    *p = v;
    return;
  }
  sbox::xor_keystream_quarter(data, size_bytes, block, q, ks);
}

__global__ void __launch_bounds__(threads_per_cta) open_kernel(const secretbox_batch batch,
                                                                const std::uint32_t* partials, std::uint8_t* flags) {
  const secretbox_chunk chunk = batch.chunks[blockIdx.y];
  fe part = sbox::fe_zero();
  if (threadIdx.x < batch.shape.poly_ctas) {
    const std::uint32_t* in = partials + (std::size_t{blockIdx.y} * sbox::poly_ctas_max + threadIdx.x) * 5;
    for (int i = 0; i < 5; ++i) part.v[i] = in[i];
  }
  const fe h = cta_sum(part);
  __shared__ bool tag_ok;
  if (threadIdx.x == 0) {
    std::uint32_t tag[4];
    sbox::poly1305_tag(h, chunk.key.s, tag);
    tag_ok = sbox::tag_equal(tag, chunk.mac);
    if (blockIdx.x == 0) flags[blockIdx.y] = tag_ok ? 1 : 0;
  }
  __syncthreads();
  if (!tag_ok) return;

  const bool aligned = aligned16(chunk.data);
  const std::uint64_t blocks = sbox::keystream_block_count(chunk.size_bytes);
  const std::uint64_t stride = std::uint64_t{gridDim.x} * threads_per_cta;
  for (std::uint64_t b = std::uint64_t{blockIdx.x} * threads_per_cta + threadIdx.x; b < blocks; b += stride) {
    std::uint32_t ks[16];
    sbox::xsalsa20_block(ks, chunk.key.subkey, chunk.key.nonce_tail, b);
    TZ_SBOX_UNROLL
    for (unsigned q = 0; q < 4; ++q) xor_quarter(chunk.data, chunk.size_bytes, aligned, b, q, ks);
  }
}

}  // namespace

cudaError_t enqueue_secretbox_batch(const secretbox_batch& batch, std::uint8_t* flags, void* scratch,
                                    cudaStream_t stream) {
  auto* partials = static_cast<std::uint32_t*>(scratch);
  poly1305_kernel<<<dim3(batch.shape.poly_ctas, batch.count), threads_per_cta, 0, stream>>>(batch, partials);
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) return rc;
  open_kernel<<<dim3(batch.shape.xor_ctas, batch.count), threads_per_cta, 0, stream>>>(batch, partials, flags);
  return cudaGetLastError();
}

}  // namespace tz::cuda::detail

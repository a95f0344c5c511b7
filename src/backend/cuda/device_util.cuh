// Device helpers shared by the CUDA kernel sources: the bf16 rounding of backend/dtype.h, stores
// into fp32 or bf16 outputs, grid sizing, and fixed-order warp/block reductions. Every reduction
// here is a fixed butterfly of shuffles and one fixed sequential pass over the warps, so its result
// depends only on the inputs and the block size (never on scheduling), and every thread of the
// warp/block ends with the same bits (IEEE addition is commutative, so both partners of each
// butterfly step compute the same sum).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace clm::cuda {

constexpr int kThreads = 256;  // block size of the element-wise and row kernels

// Round-to-nearest-even fp32 -> bf16, NaN kept a quiet NaN: the same bits as dtype.h's f32_to_bf16.
__device__ __forceinline__ uint16_t bf16_round(float v) {
  const uint32_t u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ void put(float* p, float v) { *p = v; }
__device__ __forceinline__ void put(uint16_t* p, float v) { *p = bf16_round(v); }

// Blocks for a grid-stride loop over n items (at least one, at most 2^20).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > (int64_t(1) << 20)) b = int64_t(1) << 20;
  return unsigned(b);
}

#define CLM_GRID_STRIDE(i, n)                                                      \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < int64_t(n); \
       i += int64_t(gridDim.x) * blockDim.x)

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); `sh` holds 32 values. All threads
// get the total. Safe to call repeatedly with the same `sh`.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* sh) {
  v = warp_sum(v);
  const int nw = blockDim.x / 32;
  __syncthreads();  // the previous call's readers are done with sh
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  T t = sh[0];
  for (int w = 1; w < nw; ++w) t += sh[w];
  return t;
}

}  // namespace clm::cuda

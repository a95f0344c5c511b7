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

// ---- element-wise maps, 16 bytes a load --------------------------------------------------------
// An element-wise kernel is a Map1 (out[i] = fn(in[i])) or Map2 (out[i] = fn(a[i], b[i])) run by
// launch_map: four elements a thread through one 16-byte load per input (and one 16- or 8-byte
// store) where every pointer allows it, one element a thread for the rest. Both paths evaluate the
// same fn on the same operands, so the result does not depend on the alignment.
inline bool aligned_to(const void* p, unsigned bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

__device__ __forceinline__ float4 load4(const float* p, int64_t q) {
  return reinterpret_cast<const float4*>(p)[q];
}
__device__ __forceinline__ float4 load4(const uint16_t* p, int64_t q) {
  const uint2 u = reinterpret_cast<const uint2*>(p)[q];
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                     __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}
__device__ __forceinline__ float load1(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load1(const uint16_t* p, int64_t i) {
  return __uint_as_float(uint32_t(p[i]) << 16);
}
__device__ __forceinline__ void store4(float* p, int64_t q, float4 v) {
  reinterpret_cast<float4*>(p)[q] = v;
}
__device__ __forceinline__ void store4(uint16_t* p, int64_t q, float4 v) {
  const uint2 u = make_uint2(uint32_t(bf16_round(v.x)) | (uint32_t(bf16_round(v.y)) << 16),
                             uint32_t(bf16_round(v.z)) | (uint32_t(bf16_round(v.w)) << 16));
  reinterpret_cast<uint2*>(p)[q] = u;
}
// Bytes a vector access of four elements of T covers: the alignment it needs.
template <typename T>
constexpr unsigned vec_bytes() { return 4 * sizeof(T); }

template <typename Fn, typename In, typename Out>
struct Map1 {
  const In* in;
  Out* out;
  Fn fn;
  __device__ void one(int64_t i) const { put(out + i, fn(load1(in, i))); }
  __device__ void four(int64_t q) const {
    const float4 x = load4(in, q);
    store4(out, q, make_float4(fn(x.x), fn(x.y), fn(x.z), fn(x.w)));
  }
  bool vectorisable() const { return aligned_to(in, vec_bytes<In>()) && aligned_to(out, vec_bytes<Out>()); }
};

template <typename Fn, typename Out>
struct Map2 {
  const float* a;
  const float* b;
  Out* out;
  Fn fn;
  __device__ void one(int64_t i) const { put(out + i, fn(a[i], b[i])); }
  __device__ void four(int64_t q) const {
    const float4 x = load4(a, q), y = load4(b, q);
    store4(out, q, make_float4(fn(x.x, y.x), fn(x.y, y.y), fn(x.z, y.z), fn(x.w, y.w)));
  }
  bool vectorisable() const {
    return aligned_to(a, 16) && aligned_to(b, 16) && aligned_to(out, vec_bytes<Out>());
  }
};

template <typename M>
__global__ void map_four_k(M m, int64_t quads) {
  CLM_GRID_STRIDE(q, quads) m.four(q);
}
template <typename M>
__global__ void map_one_k(M m, int64_t lo, int64_t n) {
  CLM_GRID_STRIDE(k, n - lo) m.one(lo + k);
}

// Runs map m over elements [0, n) on stream st. In-place maps (out == an input) are fine: each
// element is read before it is written, by the same thread.
template <typename M>
void launch_map(cudaStream_t st, const M& m, int64_t n) {
  if (n <= 0) return;
  const int64_t quads = m.vectorisable() ? n / 4 : 0;
  if (quads > 0) map_four_k<<<grid_for(quads), kThreads, 0, st>>>(m, quads);
  if (n > 4 * quads) map_one_k<<<grid_for(n - 4 * quads), kThreads, 0, st>>>(m, 4 * quads, n);
}

}  // namespace clm::cuda

// The cuDNN attention's operand conversion (attention_cudnn.h): fp32 rows to compact bf16, four
// elements per thread (16-byte fp32 loads) when the row length and the pointers allow it, one per
// thread otherwise. Its bf16 results come back through the backend's bf16_to_f32 (optim.cu).
#include <cstdint>

#include "backend/cuda/attention_cudnn.h"
#include "backend/cuda/device_util.cuh"

namespace clm::cuda {

namespace {

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// One thread per group of four elements of a row (hd a multiple of 4).
__global__ void rows_to_bf16_vec_k(const float4* x, uint2* y, int64_t n4, int T, int Tcap,
                                   int hd4) {
  CLM_GRID_STRIDE(i, n4) {
    const int64_t row = i / hd4, h = row / T;
    const int t = int(row % T), d = int(i % hd4);
    const float4 f = x[(h * Tcap + t) * hd4 + d];
    const uint32_t lo = uint32_t(bf16_round(f.x)) | (uint32_t(bf16_round(f.y)) << 16);
    const uint32_t hi = uint32_t(bf16_round(f.z)) | (uint32_t(bf16_round(f.w)) << 16);
    y[i] = make_uint2(lo, hi);
  }
}

__global__ void rows_to_bf16_k(const float* x, uint16_t* y, int64_t n, int T, int Tcap, int hd) {
  CLM_GRID_STRIDE(i, n) {
    const int64_t row = i / hd, h = row / T;
    const int t = int(row % T), d = int(i % hd);
    y[i] = bf16_round(x[(h * Tcap + t) * hd + d]);
  }
}

}  // namespace

void rows_to_bf16(cudaStream_t st, const float* x, uint16_t* y, int64_t heads, int T, int Tcap,
                  int hd) {
  const int64_t n = heads * T * int64_t(hd);
  if (n == 0) return;
  if (hd % 4 == 0 && aligned(x, 16) && aligned(y, 8)) {
    rows_to_bf16_vec_k<<<grid_for(n / 4), kThreads, 0, st>>>(
        reinterpret_cast<const float4*>(x), reinterpret_cast<uint2*>(y), n / 4, T, Tcap, hd / 4);
  } else {
    rows_to_bf16_k<<<grid_for(n), kThreads, 0, st>>>(x, y, n, T, Tcap, hd);
  }
}

}  // namespace clm::cuda

// Host-side launchers of the tensor-core attention (attention_gemm.cu): the same contract as
// kernels.h's attention_fwd / attention_bwd (backend/op_args.h), computed as blocked, batched
// cuBLAS GEMMs with bf16 inputs and fp32 accumulation (backend/attention_blocks.h has the plan).
// Each launcher only enqueues work on `st`, which must be the handle's stream, and returns the
// first cuBLAS failure (kernel launches are checked by the caller); its workspace is `*_scratch`
// bytes.
// Plain C++ declarations, so cuda_backend.cpp is compiled by the host compiler.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace clm::cuda {

size_t attention_gemm_fwd_scratch(int B, int H, int Tq, int Tk, int hd, int window);
cublasStatus_t attention_gemm_fwd(cublasHandle_t blas, cudaStream_t st, const float* q,
                                  const float* k, const float* v, float* o, float* lse, int B,
                                  int H, int Hkv, int Tq, int Tk, int Tk_cap, int hd, int window,
                                  void* scratch);

size_t attention_gemm_bwd_scratch(int B, int H, int Hkv, int T, int hd, int window);
cublasStatus_t attention_gemm_bwd(cublasHandle_t blas, cudaStream_t st, const float* q,
                                  const float* k, const float* v, const float* o, const float* lse,
                                  const float* dout, float* dq, float* dk, float* dv, int B, int H,
                                  int Hkv, int T, int hd, int window, void* scratch);

}  // namespace clm::cuda

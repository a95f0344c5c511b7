// Causal grouped-query attention on the tensor cores: the block plan of backend/attention_blocks.h
// executed as strided-batched cuBLAS GEMMs over the B*H heads, bf16 inputs and fp32 accumulation,
// with small kernels between them. Same contract and scale (1/sqrt(hd)) as attention.cu.
//
// q, k, v (and dO) are first rounded to bf16, k and v expanded from Hkv to H heads so one batch
// stride serves every head. Forward, per query block: S = Q K^T (fp32), a row softmax of the
// visible scores writes P (bf16) and the log-sum-exp, O = P V (fp32, straight into o).
// Backward, per query block, from the saved log-sum-exp: S = Q K^T and dP = dO V^T (fp32), then
// P and dS = P (dP - D) scale (bf16, D = rowsum(dO * O) in fp32 of the bf16 dO), dV += P^T dO,
// dK += dS^T Q and dQ = dS K. dK and dV accumulate in fp32 across the blocks in block order, and
// with GQA per query head, summed over each kv head's group at the end in head order: no atomics,
// the same bits every run.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>

#include "backend/attention_blocks.h"
#include "backend/cuda/attention_gemm.h"
#include "backend/cuda/device_util.cuh"

namespace clm::cuda {

namespace {

// y[b, h, t, :] = bf16(x[b, h / (H / Hx), t, :]) for t < T, where x holds Hx heads of Tcap rows.
__global__ void heads_bf16_k(const float* x, uint16_t* y, int64_t n, int H, int Hx, int T,
                             int Tcap, int hd) {
  const int group = H / Hx;
  CLM_GRID_STRIDE(i, n) {
    const int64_t row = i / hd, bh = row / T;
    const int d = int(i % hd), t = int(row % T);
    const int64_t b = bh / H, h = bh % H;
    y[i] = bf16_round(x[((b * Hx + h / group) * Tcap + t) * hd + d]);
  }
}

// One warp per row of a forward block: row = bh * nq + r is query q0 + r of head bh, at absolute
// position off + q0 + r; its scores S[row, 0..nk) are keys k0... P gets the normalised
// probabilities (0 where not visible), lse (if not null) the row's log-sum-exp.
__global__ void softmax_rows_k(const float* S, uint16_t* P, float* lse, int64_t rows, int nq,
                               int nk, int ld, int q0, int off, int k0, int Tq, int window,
                               float scale) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t bh = row / nq;
  const int r = int(row % nq), pos = off + q0 + r;
  const float* s = S + row * ld;
  uint16_t* p = P + row * ld;
  const int c0 = max(0, attention_first_key(pos, window) - k0), c1 = min(nk, pos - k0 + 1);
  float m = -INFINITY, l = 0.0f;  // this lane's running maximum and sum of exp(x - m)
  for (int c = c0 + lane; c < c1; c += 32) {
    const float x = s[c] * scale;
    if (x > m) {
      l = l * expf(m - x) + 1.0f;
      m = x;
    } else {
      l += expf(x - m);
    }
  }
  const float mx = warp_max(m);
  const float L = mx + logf(warp_sum(m == -INFINITY ? 0.0f : l * expf(m - mx)));
  for (int c = lane; c < nk; c += 32)
    p[c] = c >= c0 && c < c1 ? bf16_round(expf(s[c] * scale - L)) : uint16_t(0);
  if (lse && lane == 0) lse[bh * Tq + q0 + r] = L;
}

// D[row] = dO[row] . O[row] with dO the bf16 copy that dP = dO V^T multiplies, one warp per row.
// O = P V of the same bf16 P and V, so D = sum_j P_j dP_j and each row of dS sums to ~0 (an fp32
// dO here would leave a per-row offset of dO's rounding error in every dS of the row).
__global__ void rowdot_k(const uint16_t* dout, const float* o, float* D, int64_t rows, int hd) {
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= rows) return;
  float acc = 0.0f;
  for (int d = lane; d < hd; d += 32)
    acc += __uint_as_float(uint32_t(dout[w * hd + d]) << 16) * o[w * hd + d];
  acc = warp_sum(acc);
  if (lane == 0) D[w] = acc;
}

// One warp per row of a backward block (query q0 + r of head bh, T queries and keys): recomputes
// P = exp(scale S - lse) where visible and dS = P (dP - D) scale, both rounded to bf16.
__global__ void probs_ds_k(const float* S, const float* dP, const float* lse, const float* D,
                           uint16_t* P, uint16_t* dS, int64_t rows, int nq, int nk, int ld, int q0,
                           int k0, int T, int window, float scale) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t bh = row / nq;
  const int r = int(row % nq), pos = q0 + r;
  const float L = lse[bh * T + pos], dd = D[bh * T + pos];
  const float* s = S + row * ld;
  const float* dp = dP + row * ld;
  for (int c = lane; c < nk; c += 32) {
    const float pv = attention_visible(pos, k0 + c, window) ? expf(s[c] * scale - L) : 0.0f;
    P[row * ld + c] = bf16_round(pv);
    dS[row * ld + c] = bf16_round(pv * (dp[c] - dd) * scale);
  }
}

// out[b, g, :] = sum over the group's heads j = 0..G-1 of e[b, g*G + j, :] (per_head floats per
// head), added in head order.
__global__ void group_sum_k(const float* e, float* out, int64_t n, int G, int64_t per_head) {
  CLM_GRID_STRIDE(i, n) {
    const int64_t bg = i / per_head, rest = i % per_head;
    const float* src = e + bg * G * per_head + rest;
    float acc = 0.0f;
    for (int j = 0; j < G; ++j) acc += src[j * per_head];
    out[i] = acc;
  }
}

unsigned warp_rows_grid(int64_t rows) { return unsigned((rows * 32 + kThreads - 1) / kThreads); }

// A row-major operand of a batched GEMM: base pointer, element type, row stride, batch stride.
struct Mat {
  const void* p;
  cudaDataType_t t;
  int ld;
  long long stride;
};

// Row-major, batched over `batch`: D[M,N] = op(A)[M,K] op(B)[K,N] + beta D, where A is stored
// [M,K] or (ta) [K,M] and B [K,N] or (tb) [N,K]; fp32 accumulation. cuBLAS is column-major, so
// this is the column-major D^T = op(B)^T op(A)^T (the derivation above CudaBackend::matmul).
cublasStatus_t gemm_rm(cublasHandle_t h, bool ta, bool tb, int M, int N, int K, Mat A, Mat B,
                       float* D, int ldd, long long sd, float beta, int batch) {
  const float alpha = 1.0f;
  return cublasGemmStridedBatchedEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B.p, B.t, B.ld,
                                    B.stride, A.p, A.t, A.ld, A.stride, &beta, D, CUDA_R_32F, ldd,
                                    sd, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// First failure of a sequence of cuBLAS calls.
struct Status {
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  void operator()(cublasStatus_t x) {
    if (s == CUBLAS_STATUS_SUCCESS) s = x;
  }
};

template <typename T>
T* at(void* base, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

// Rounds heads to bf16 (see heads_bf16_k): B*H heads of T rows from Hx heads of Tcap rows.
void heads_bf16(cudaStream_t st, const float* x, uint16_t* y, int B, int H, int Hx, int T, int Tcap,
                int hd) {
  const int64_t n = int64_t(B) * H * T * hd;
  heads_bf16_k<<<grid_for(n), kThreads, 0, st>>>(x, y, n, H, Hx, T, Tcap, hd);
}

Mat bf16_heads(const uint16_t* p, int64_t row0, int hd, int T) {
  return {p + row0 * hd, CUDA_R_16BF, hd, (long long)T * hd};
}
Mat bf16_tile(const uint16_t* p, const AttnBlock& b) {
  return {p, CUDA_R_16BF, b.ld, (long long)b.nq * b.ld};
}

}  // namespace

size_t attention_gemm_fwd_scratch(int B, int H, int Tq, int Tk, int hd, int window) {
  const AttnPlan plan = attention_plan(Tq, Tk, window, attention_block_rows(Tq));
  return attention_fwd_layout(plan, B * H, hd).bytes;
}

cublasStatus_t attention_gemm_fwd(cublasHandle_t blas, cudaStream_t st, const float* q,
                                  const float* k, const float* v, float* o, float* lse, int B,
                                  int H, int Hkv, int Tq, int Tk, int Tk_cap, int hd, int window,
                                  void* scratch) {
  const int BH = B * H;
  if (int64_t(BH) * Tq == 0) return CUBLAS_STATUS_SUCCESS;
  const AttnPlan plan = attention_plan(Tq, Tk, window, attention_block_rows(Tq));
  const AttnFwdLayout L = attention_fwd_layout(plan, BH, hd);
  auto* qb = at<uint16_t>(scratch, L.q);
  auto* kb = at<uint16_t>(scratch, L.k);
  auto* vb = at<uint16_t>(scratch, L.v);
  auto* S = at<float>(scratch, L.s);
  auto* P = at<uint16_t>(scratch, L.p);
  heads_bf16(st, q, qb, B, H, H, Tq, Tq, hd);
  heads_bf16(st, k, kb, B, H, Hkv, Tk, Tk_cap, hd);
  heads_bf16(st, v, vb, B, H, Hkv, Tk, Tk_cap, hd);
  const float scale = 1.0f / sqrtf(float(hd));
  Status status;
  for (const AttnBlock& b : plan.blocks) {
    const long long tile = (long long)b.nq * b.ld;
    status(gemm_rm(blas, false, true, b.nq, b.nk, hd, bf16_heads(qb, b.q0, hd, Tq),
                   bf16_heads(kb, b.k0, hd, Tk), S, b.ld, tile, 0.0f, BH));  // S = Q K^T
    const int64_t rows = int64_t(BH) * b.nq;
    softmax_rows_k<<<warp_rows_grid(rows), kThreads, 0, st>>>(
        S, P, lse, rows, b.nq, b.nk, b.ld, b.q0, Tk - Tq, b.k0, Tq, window, scale);
    status(gemm_rm(blas, false, false, b.nq, hd, b.nk, bf16_tile(P, b),
                   bf16_heads(vb, b.k0, hd, Tk), o + int64_t(b.q0) * hd, hd, (long long)Tq * hd,
                   0.0f, BH));  // O = P V
  }
  return status.s;
}

size_t attention_gemm_bwd_scratch(int B, int H, int Hkv, int T, int hd, int window) {
  const AttnPlan plan = attention_plan(T, T, window, attention_block_rows(T));
  return attention_bwd_layout(plan, B * H, hd, Hkv < H).bytes;
}

cublasStatus_t attention_gemm_bwd(cublasHandle_t blas, cudaStream_t st, const float* q,
                                  const float* k, const float* v, const float* o, const float* lse,
                                  const float* dout, float* dq, float* dk, float* dv, int B, int H,
                                  int Hkv, int T, int hd, int window, void* scratch) {
  const int BH = B * H;
  if (int64_t(BH) * T == 0) return CUBLAS_STATUS_SUCCESS;
  const bool expand = Hkv < H;
  const AttnPlan plan = attention_plan(T, T, window, attention_block_rows(T));
  const AttnBwdLayout L = attention_bwd_layout(plan, BH, hd, expand);
  auto* qb = at<uint16_t>(scratch, L.q);
  auto* kb = at<uint16_t>(scratch, L.k);
  auto* vb = at<uint16_t>(scratch, L.v);
  auto* dob = at<uint16_t>(scratch, L.dout);
  auto* D = at<float>(scratch, L.rows);
  auto* S = at<float>(scratch, L.s);
  auto* dP = at<float>(scratch, L.dp);
  auto* P = at<uint16_t>(scratch, L.p);
  auto* dS = at<uint16_t>(scratch, L.ds);
  float* gk = expand ? at<float>(scratch, L.dk) : dk;  // dK, dV per query head
  float* gv = expand ? at<float>(scratch, L.dv) : dv;
  const int64_t heads = int64_t(BH) * T * hd, rows_all = int64_t(BH) * T;
  heads_bf16(st, q, qb, B, H, H, T, T, hd);
  heads_bf16(st, k, kb, B, H, Hkv, T, T, hd);
  heads_bf16(st, v, vb, B, H, Hkv, T, T, hd);
  heads_bf16(st, dout, dob, B, H, H, T, T, hd);
  rowdot_k<<<warp_rows_grid(rows_all), kThreads, 0, st>>>(dob, o, D, rows_all, hd);
  cudaMemsetAsync(gk, 0, size_t(heads) * 4, st);
  cudaMemsetAsync(gv, 0, size_t(heads) * 4, st);
  const float scale = 1.0f / sqrtf(float(hd));
  const long long hs = (long long)T * hd;
  Status status;
  for (const AttnBlock& b : plan.blocks) {
    const long long tile = (long long)b.nq * b.ld;
    status(gemm_rm(blas, false, true, b.nq, b.nk, hd, bf16_heads(qb, b.q0, hd, T),
                   bf16_heads(kb, b.k0, hd, T), S, b.ld, tile, 0.0f, BH));  // S = Q K^T
    status(gemm_rm(blas, false, true, b.nq, b.nk, hd, bf16_heads(dob, b.q0, hd, T),
                   bf16_heads(vb, b.k0, hd, T), dP, b.ld, tile, 0.0f, BH));  // dP = dO V^T
    const int64_t rows = int64_t(BH) * b.nq;
    probs_ds_k<<<warp_rows_grid(rows), kThreads, 0, st>>>(S, dP, lse, D, P, dS, rows, b.nq, b.nk,
                                                           b.ld, b.q0, b.k0, T, window, scale);
    float* gv0 = gv + int64_t(b.k0) * hd;
    float* gk0 = gk + int64_t(b.k0) * hd;
    status(gemm_rm(blas, true, false, b.nk, hd, b.nq, bf16_tile(P, b), bf16_heads(dob, b.q0, hd, T),
                   gv0, hd, hs, 1.0f, BH));  // dV += P^T dO
    status(gemm_rm(blas, true, false, b.nk, hd, b.nq, bf16_tile(dS, b), bf16_heads(qb, b.q0, hd, T),
                   gk0, hd, hs, 1.0f, BH));  // dK += dS^T Q
    status(gemm_rm(blas, false, false, b.nq, hd, b.nk, bf16_tile(dS, b),
                   bf16_heads(kb, b.k0, hd, T), dq + int64_t(b.q0) * hd, hd, hs, 0.0f,
                   BH));  // dQ = dS K
  }
  if (expand) {
    const int64_t n = int64_t(B) * Hkv * T * hd;
    group_sum_k<<<grid_for(n), kThreads, 0, st>>>(gk, dk, n, H / Hkv, int64_t(T) * hd);
    group_sum_k<<<grid_for(n), kThreads, 0, st>>>(gv, dv, n, H / Hkv, int64_t(T) * hd);
  }
  return status.s;
}

}  // namespace clm::cuda

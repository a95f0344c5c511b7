// Causal grouped-query attention on the GPU, in fp32, tiled with an online softmax (the same
// algorithm as backend/cpu/attention.cpp): no T x T matrix is formed; the forward saves the
// log-sum-exp per query row and the backward recomputes each probability tile from it.
//
// Tiles are 64 queries x 64 keys, 256 threads per block as a 16 x 16 grid: thread (ty, tx) owns
// rows 4ty..4ty+3 of every 64-row tile and the columns tx + 16c (strided, so the 16 threads of a
// row read distinct shared-memory banks). The 16 threads that share a row are one half-warp, so row
// maxima and sums are fixed butterflies of shuffles within it. Head vectors sit in shared memory
// zero-padded to HD (64 or 128, a template parameter) with rows of HD + 1 floats.
//
// Backward, deterministic without atomics: dK and dV by one block per (batch, kv head, key tile),
// looping over the group's query heads and the query tiles at or after the key tile in a fixed
// order; dQ by another block per (batch, head, query tile) looping over key tiles. Each gradient
// element is summed by one thread in a fixed order. The probabilities and dP are recomputed in both
// kernels (more arithmetic, no reduction across blocks).
#include <algorithm>
#include <cmath>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace clm::cuda {

namespace {

constexpr int TILE = 64;       // query rows and keys per tile
constexpr int NT = 256;        // threads per block
constexpr int PLD = TILE + 1;  // row stride of the probability tile

// Rows [0, nvalid) of a row-major [.., hd] matrix at g into s[TILE][HD + 1], times mul; zero past
// nvalid and past hd.
template <int HD>
__device__ __forceinline__ void load_rows(float* s, const float* g, int nvalid, int hd, float mul) {
  for (int idx = threadIdx.x; idx < TILE * HD; idx += NT) {
    const int r = idx / HD, d = idx % HD;
    s[r * (HD + 1) + d] = (r < nvalid && d < hd) ? g[int64_t(r) * hd + d] * mul : 0.0f;
  }
}

// acc[i][j] += sum_d A[4ty+i][d] * B[tx+16j][d] over HD (both tiles [TILE][HD+1]).
template <int HD>
__device__ __forceinline__ void tile_abt(float (&acc)[4][4], const float* A, const float* Bt,
                                         int ty, int tx) {
  constexpr int LD = HD + 1;
#pragma unroll 4
  for (int d = 0; d < HD; ++d) {
    float a[4], b[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = A[(ty * 4 + i) * LD + d];
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = Bt[(tx + 16 * j) * LD + d];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

// out[i][c] += sum_k P[4ty+i][k] * M[k][tx+16c] (P: [TILE][PLD], M: [TILE][HD+1]).
template <int HD>
__device__ __forceinline__ void tile_pm(float (&out)[4][HD / 16], const float* P, const float* M,
                                        int ty, int tx) {
  constexpr int LD = HD + 1;
#pragma unroll 2
  for (int k = 0; k < TILE; ++k) {
    float p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = P[(ty * 4 + i) * PLD + k];
#pragma unroll
    for (int c = 0; c < HD / 16; ++c) {
      const float m = M[k * LD + tx + 16 * c];
#pragma unroll
      for (int i = 0; i < 4; ++i) out[i][c] = fmaf(p[i], m, out[i][c]);
    }
  }
}

// out[i][c] += sum_r P[r][4ty+i] * M[r][tx+16c]: the transposed product (P^T M) for dK and dV.
template <int HD>
__device__ __forceinline__ void tile_ptm(float (&out)[4][HD / 16], const float* P, const float* M,
                                         int ty, int tx) {
  constexpr int LD = HD + 1;
#pragma unroll 2
  for (int r = 0; r < TILE; ++r) {
    float p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = P[r * PLD + ty * 4 + i];
#pragma unroll
    for (int c = 0; c < HD / 16; ++c) {
      const float m = M[r * LD + tx + 16 * c];
#pragma unroll
      for (int i = 0; i < 4; ++i) out[i][c] = fmaf(p[i], m, out[i][c]);
    }
  }
}

__device__ __forceinline__ float half_warp_max(float v) {
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float half_warp_sum(float v) {
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int HD>
constexpr size_t fwd_smem() {
  return (size_t(2) * TILE * (HD + 1) + size_t(TILE) * PLD) * 4;
}
template <int HD>
constexpr size_t bwd_smem() {
  return (size_t(4) * TILE * (HD + 1) + size_t(TILE) * PLD + 2 * TILE) * 4;
}

// Block (bh = b*H + h, query tile): the CPU's attention_fwd task. Query row i of the call sits at
// absolute position off + i (off = Tk - Tq) and sees keys 0..off+i (with window > 0 only the last
// `window` of them); keys >= Tk are never read.
template <int HD>
__global__ void __launch_bounds__(NT)
    attn_fwd_k(const float* q, const float* k, const float* v, float* o, float* lse, int H, int Hkv,
               int Tq, int Tk, int Tk_cap, int hd, float scale, int window) {
  extern __shared__ float sm[];
  constexpr int LD = HD + 1, NC = HD / 16;
  float* sQ = sm;
  float* sKV = sQ + TILE * LD;  // K, then V of the current key tile
  float* sP = sKV + TILE * LD;
  const int bh = blockIdx.x, b = bh / H, h = bh % H, kvh = h / (H / Hkv);
  const int q0 = (int(gridDim.y) - 1 - int(blockIdx.y)) * TILE;  // longest tiles first
  const int nq = min(TILE, Tq - q0), off = Tk - Tq;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const float* kb = k + (int64_t(b) * Hkv + kvh) * Tk_cap * hd;
  const float* vb = v + (int64_t(b) * Hkv + kvh) * Tk_cap * hd;
  load_rows<HD>(sQ, q + (int64_t(bh) * Tq + q0) * hd, nq, hd, scale);  // Q scaled, as the CPU
  float acc[4][NC], m[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[i][c] = 0.0f;
  }
  const int last_key = off + q0 + nq - 1;
  const int first_key = window > 0 ? max(0, off + q0 - window + 1) : 0;  // the first row's window
  for (int k0 = first_key / TILE * TILE; k0 <= last_key; k0 += TILE) {
    const int nk = min(TILE, Tk - k0);
    __syncthreads();  // the previous tile's readers of sKV and sP are done
    load_rows<HD>(sKV, kb + int64_t(k0) * hd, nk, hd, 1.0f);
    __syncthreads();
    float s[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) s[i][j] = 0.0f;
    tile_abt<HD>(s, sQ, sKV, ty, tx);  // S = (scale Q) K^T
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = ty * 4 + i;
      const int lim = r < nq ? min(nk, off + q0 + r - k0 + 1) : 0;  // keys [k0+lo, k0+lim) visible
      const int lo = window > 0 ? max(0, off + q0 + r - window + 1 - k0) : 0;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (tx + 16 * j < lim && tx + 16 * j >= lo) mx = fmaxf(mx, s[i][j]);
      mx = half_warp_max(mx);
      const float mnew = fmaxf(m[i], mx);
      const float corr = m[i] == -INFINITY ? 0.0f : expf(m[i] - mnew);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float p = tx + 16 * j < lim && tx + 16 * j >= lo ? expf(s[i][j] - mnew) : 0.0f;
        s[i][j] = p;
        sum += p;
      }
      sum = half_warp_sum(sum);
      l[i] = l[i] * corr + sum;
      m[i] = mnew;
#pragma unroll
      for (int c = 0; c < NC; ++c) acc[i][c] *= corr;
#pragma unroll
      for (int j = 0; j < 4; ++j) sP[r * PLD + tx + 16 * j] = s[i][j];
    }
    __syncthreads();  // S is done with K; P is written
    load_rows<HD>(sKV, vb + int64_t(k0) * hd, nk, hd, 1.0f);
    __syncthreads();
    tile_pm<HD>(acc, sP, sKV, ty, tx);  // O += P V (P is zero past each row's limit)
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
    if (r >= nq) continue;
    const float inv = 1.0f / l[i];
    float* orow = o + (int64_t(bh) * Tq + q0 + r) * hd;
#pragma unroll
    for (int c = 0; c < NC; ++c)
      if (tx + 16 * c < hd) orow[tx + 16 * c] = acc[i][c] * inv;
    if (lse && tx == 0) lse[int64_t(bh) * Tq + q0 + r] = m[i] + logf(l[i]);
  }
}

// D[row] = dO[row] . O[row] (the softmax-backward row term), one warp per row.
__global__ void attn_rowdot_k(const float* dout, const float* o, float* D, int64_t rows, int hd) {
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= rows) return;
  float acc = 0.0f;
  for (int d = lane; d < hd; d += 32) acc += dout[w * hd + d] * o[w * hd + d];
  acc = warp_sum(acc);
  if (lane == 0) D[w] = acc;
}

// Probabilities and dS of one (query tile q0, key tile k0) pair in registers: rows 4ty+i are
// queries, columns tx+16j keys. s = scale q.k, p = exp(s - lse) where visible, and
// dS = p (dP - D) scale (the gradient with respect to the unscaled q.k, as on the CPU).
template <int HD>
__device__ __forceinline__ void probs_and_ds(float (&p)[4][4], float (&ds)[4][4], const float* sQ,
                                             const float* sdO, const float* sK, const float* sV,
                                             const float* sL, const float* sD, int q0, int nq,
                                             int k0, int nk, float scale, int window, int ty,
                                             int tx) {
  float dp[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) p[i][j] = dp[i][j] = 0.0f;
  tile_abt<HD>(p, sQ, sK, ty, tx);    // Q K^T
  tile_abt<HD>(dp, sdO, sV, ty, tx);  // dO V^T
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = tx + 16 * j;
      const bool vis = r < nq && c < nk && k0 + c <= q0 + r && (window <= 0 || q0 + r - (k0 + c) < window);
      const float pv = vis ? expf(p[i][j] * scale - sL[r]) : 0.0f;
      p[i][j] = pv;
      ds[i][j] = pv * (dp[i][j] - sD[r]) * scale;
    }
  }
}

// Loads a query tile's Q (unscaled), dO, log-sum-exp and D rows.
template <int HD>
__device__ __forceinline__ void load_query_tile(float* sQ, float* sdO, float* sL, float* sD,
                                                const float* q, const float* dout, const float* lse,
                                                const float* D, int64_t bh, int T, int q0, int nq,
                                                int hd) {
  load_rows<HD>(sQ, q + (bh * T + q0) * hd, nq, hd, 1.0f);
  load_rows<HD>(sdO, dout + (bh * T + q0) * hd, nq, hd, 1.0f);
  for (int r = threadIdx.x; r < TILE; r += NT) {
    sL[r] = r < nq ? lse[bh * T + q0 + r] : 0.0f;
    sD[r] = r < nq ? D[bh * T + q0 + r] : 0.0f;
  }
}

// Block (b*Hkv + kvh, key tile): dK and dV of the tile's keys (=).
template <int HD>
__global__ void __launch_bounds__(NT)
    attn_bwd_dkdv_k(const float* q, const float* k, const float* v, const float* lse,
                    const float* D, const float* dout, float* dk, float* dv, int H, int Hkv, int T,
                    int hd, float scale, int window) {
  extern __shared__ float sm[];
  constexpr int LD = HD + 1, NC = HD / 16;
  float* sK = sm;
  float* sV = sK + TILE * LD;
  float* sQ = sV + TILE * LD;
  float* sdO = sQ + TILE * LD;
  float* sPS = sdO + TILE * LD;
  float* sL = sPS + TILE * PLD;
  float* sD = sL + TILE;
  const int bk = blockIdx.x, b = bk / Hkv, kvh = bk % Hkv, group = H / Hkv;
  const int k0 = blockIdx.y * TILE, nk = min(TILE, T - k0);
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  load_rows<HD>(sK, k + (int64_t(bk) * T + k0) * hd, nk, hd, 1.0f);
  load_rows<HD>(sV, v + (int64_t(bk) * T + k0) * hd, nk, hd, 1.0f);
  float gk[4][NC], gv[4][NC];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < NC; ++c) gk[i][c] = gv[i][c] = 0.0f;
  for (int hh = 0; hh < group; ++hh) {
    const int64_t bh = int64_t(b) * H + int64_t(kvh) * group + hh;
    // query tiles that see any of these keys: up to the last key's window end
    const int q_end = window > 0 ? int(min(int64_t(T), int64_t(k0) + nk - 1 + window)) : T;
    for (int q0 = k0; q0 < q_end; q0 += TILE) {
      const int nq = min(TILE, T - q0);
      __syncthreads();
      load_query_tile<HD>(sQ, sdO, sL, sD, q, dout, lse, D, bh, T, q0, nq, hd);
      __syncthreads();
      float p[4][4], ds[4][4];
      probs_and_ds<HD>(p, ds, sQ, sdO, sK, sV, sL, sD, q0, nq, k0, nk, scale, window, ty, tx);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) sPS[(ty * 4 + i) * PLD + tx + 16 * j] = p[i][j];
      __syncthreads();
      tile_ptm<HD>(gv, sPS, sdO, ty, tx);  // dV += P^T dO
      __syncthreads();
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) sPS[(ty * 4 + i) * PLD + tx + 16 * j] = ds[i][j];
      __syncthreads();
      tile_ptm<HD>(gk, sPS, sQ, ty, tx);  // dK += dS^T Q
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
    if (r >= nk) continue;
    float* krow = dk + (int64_t(bk) * T + k0 + r) * hd;
    float* vrow = dv + (int64_t(bk) * T + k0 + r) * hd;
#pragma unroll
    for (int c = 0; c < NC; ++c)
      if (tx + 16 * c < hd) {
        krow[tx + 16 * c] = gk[i][c];
        vrow[tx + 16 * c] = gv[i][c];
      }
  }
}

// Block (b*H + h, query tile): dQ of the tile's queries (=).
template <int HD>
__global__ void __launch_bounds__(NT)
    attn_bwd_dq_k(const float* q, const float* k, const float* v, const float* lse, const float* D,
                  const float* dout, float* dq, int H, int Hkv, int T, int hd, float scale,
                  int window) {
  extern __shared__ float sm[];
  constexpr int LD = HD + 1, NC = HD / 16;
  float* sK = sm;
  float* sV = sK + TILE * LD;
  float* sQ = sV + TILE * LD;
  float* sdO = sQ + TILE * LD;
  float* sPS = sdO + TILE * LD;
  float* sL = sPS + TILE * PLD;
  float* sD = sL + TILE;
  const int bh = blockIdx.x, b = bh / H, h = bh % H, kvh = h / (H / Hkv);
  const int q0 = (int(gridDim.y) - 1 - int(blockIdx.y)) * TILE, nq = min(TILE, T - q0);
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t bk = int64_t(b) * Hkv + kvh;
  load_query_tile<HD>(sQ, sdO, sL, sD, q, dout, lse, D, bh, T, q0, nq, hd);
  float gq[4][NC];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < NC; ++c) gq[i][c] = 0.0f;
  const int first_key = window > 0 ? max(0, q0 - window + 1) : 0;  // the first row's window
  for (int k0 = first_key / TILE * TILE; k0 < q0 + nq; k0 += TILE) {
    const int nk = min(TILE, T - k0);
    __syncthreads();
    load_rows<HD>(sK, k + (bk * T + k0) * hd, nk, hd, 1.0f);
    load_rows<HD>(sV, v + (bk * T + k0) * hd, nk, hd, 1.0f);
    __syncthreads();
    float p[4][4], ds[4][4];
    probs_and_ds<HD>(p, ds, sQ, sdO, sK, sV, sL, sD, q0, nq, k0, nk, scale, window, ty, tx);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) sPS[(ty * 4 + i) * PLD + tx + 16 * j] = ds[i][j];
    __syncthreads();
    tile_pm<HD>(gq, sPS, sK, ty, tx);  // dQ += dS K
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
    if (r >= nq) continue;
    float* qrow = dq + (int64_t(bh) * T + q0 + r) * hd;
#pragma unroll
    for (int c = 0; c < NC; ++c)
      if (tx + 16 * c < hd) qrow[tx + 16 * c] = gq[i][c];
  }
}

// The kernels need more than the default 48 KiB of shared memory; the limit is raised once per
// device and kernel (cudaFuncSetAttribute is per device context).
template <typename K>
void allow_smem(K kernel, size_t bytes) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

template <int HD>
void fwd_launch(cudaStream_t st, const float* q, const float* k, const float* v, float* o,
                float* lse, int B, int H, int Hkv, int Tq, int Tk, int Tk_cap, int hd, int window) {
  allow_smem(attn_fwd_k<HD>, fwd_smem<HD>());
  const dim3 grid(unsigned(B * H), unsigned((Tq + TILE - 1) / TILE));
  attn_fwd_k<HD><<<grid, NT, fwd_smem<HD>(), st>>>(q, k, v, o, lse, H, Hkv, Tq, Tk, Tk_cap, hd,
                                                   1.0f / sqrtf(float(hd)), window);
}

template <int HD>
void bwd_launch(cudaStream_t st, const float* q, const float* k, const float* v, const float* lse,
                const float* D, const float* dout, float* dq, float* dk, float* dv, int B, int H,
                int Hkv, int T, int hd, int window) {
  const float scale = 1.0f / sqrtf(float(hd));
  const unsigned tiles = unsigned((T + TILE - 1) / TILE);
  allow_smem(attn_bwd_dkdv_k<HD>, bwd_smem<HD>());
  allow_smem(attn_bwd_dq_k<HD>, bwd_smem<HD>());
  attn_bwd_dkdv_k<HD><<<dim3(unsigned(B * Hkv), tiles), NT, bwd_smem<HD>(), st>>>(
      q, k, v, lse, D, dout, dk, dv, H, Hkv, T, hd, scale, window);
  attn_bwd_dq_k<HD><<<dim3(unsigned(B * H), tiles), NT, bwd_smem<HD>(), st>>>(
      q, k, v, lse, D, dout, dq, H, Hkv, T, hd, scale, window);
}

}  // namespace

int attention_max_head_dim() { return 128; }

size_t attention_smem_bytes(int hd) {
  return hd <= 64 ? std::max(fwd_smem<64>(), bwd_smem<64>())
                  : std::max(fwd_smem<128>(), bwd_smem<128>());
}

void attention_fwd(cudaStream_t st, const float* q, const float* k, const float* v, float* o,
                   float* lse, int B, int H, int Hkv, int Tq, int Tk, int Tk_cap, int hd, int window) {
  if (int64_t(B) * H * Tq == 0) return;
  if (hd <= 64)
    fwd_launch<64>(st, q, k, v, o, lse, B, H, Hkv, Tq, Tk, Tk_cap, hd, window);
  else
    fwd_launch<128>(st, q, k, v, o, lse, B, H, Hkv, Tq, Tk, Tk_cap, hd, window);
}

size_t attention_bwd_scratch(int B, int H, int T) {
  return size_t(std::max<int64_t>(int64_t(B) * H * T, 1)) * 4;
}

void attention_bwd(cudaStream_t st, const float* q, const float* k, const float* v, const float* o,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, int B,
                   int H, int Hkv, int T, int hd, int window, void* scratch) {
  const int64_t rows = int64_t(B) * H * T;
  if (rows == 0) return;
  float* D = static_cast<float*>(scratch);
  attn_rowdot_k<<<unsigned((rows * 32 + kThreads - 1) / kThreads), kThreads, 0, st>>>(dout, o, D,
                                                                                      rows, hd);
  if (hd <= 64)
    bwd_launch<64>(st, q, k, v, lse, D, dout, dq, dk, dv, B, H, Hkv, T, hd, window);
  else
    bwd_launch<128>(st, q, k, v, lse, D, dout, dq, dk, dv, B, H, Hkv, T, hd, window);
}

}  // namespace clm::cuda

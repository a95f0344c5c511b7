// CUDA kernels of the GPT's element-wise and row-wise layers, forward next to backward, each
// written against its CPU reference in backend/cpu/ops.cpp (the same formulas in the same
// association, so the two backends differ only by the rounding of transcendental functions and of
// reduction order). Reductions whose result must be reproducible (norm gains, embedding rows, the
// loss) run in a fixed order: per-chunk partials over a split that depends only on the shape, then
// one ordered pass. No float atomics anywhere.
#include <algorithm>
#include <climits>
#include <cmath>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace clm::cuda {

namespace {

// Fixed numbers of row chunks for gain gradients (partials per chunk, then summed in chunk order):
// enough blocks to fill a GPU, and a split that depends only on the shape, never on the device.
constexpr int64_t kNormChunks = 512;   // RMSNorm rows (one block of 256 threads per chunk)
constexpr int64_t kHeadChunks = 1024;  // qk-norm head rows (one block of ~head_dim threads)

// dst[c] += sum over chunks (in chunk order) of part[chunk * C + c].
__global__ void add_column_partials_k(const float* part, int64_t chunks, int64_t C, float* dst) {
  CLM_GRID_STRIDE(c, C) {
    float acc = dst[c];
    for (int64_t k = 0; k < chunks; ++k) acc += part[k * C + c];
    dst[c] = acc;
  }
}

// ---- embedding ----------------------------------------------------------------------------------
__global__ void embedding_fwd_k(const int32_t* tok, const float* wte, float* out, int64_t N,
                                int64_t C) {
  CLM_GRID_STRIDE(i, N * C) {
    const int64_t n = i / C, c = i - n * C;
    out[i] = wte[int64_t(tok[n]) * C + c];
  }
}

// The backward sorts the keys (token << 32 | n), which are unique, so any correct sort gives the
// one order "by token, then by position", then adds each token's rows in position order: the CPU's
// order (dwte[t] += dout[n] for n ascending). Bitonic sort over a power-of-two key count: whole
// 2048-key tiles in shared memory, longer strides one global pass each.
constexpr int kSortTile = 2048;  // keys per shared-memory tile: 1024 threads x 2

__global__ void emb_keys_k(const int32_t* tok, unsigned long long* keys, int64_t N, int64_t Np) {
  CLM_GRID_STRIDE(i, Np) {
    keys[i] = i < N ? (static_cast<unsigned long long>(static_cast<uint32_t>(tok[i])) << 32) |
                          static_cast<unsigned long long>(i)
                    : ~0ull;
  }
}

__device__ __forceinline__ void cmp_swap(unsigned long long& a, unsigned long long& b, bool up) {
  if ((a > b) == up) {
    const unsigned long long t = a;
    a = b;
    b = t;
  }
}

// Stages k = 2 .. kSortTile (all strides) within each tile; the direction follows the global index.
__global__ void bitonic_tile_sort_k(unsigned long long* keys) {
  __shared__ unsigned long long s[kSortTile];
  const int64_t base = int64_t(blockIdx.x) * kSortTile;
  const int t = threadIdx.x;
  s[t] = keys[base + t];
  s[t + kSortTile / 2] = keys[base + t + kSortTile / 2];
  __syncthreads();
  for (int k = 2; k <= kSortTile; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      const int i = 2 * t - (t & (j - 1));
      cmp_swap(s[i], s[i + j], ((base + i) & k) == 0);
      __syncthreads();
    }
  keys[base + t] = s[t];
  keys[base + t + kSortTile / 2] = s[t + kSortTile / 2];
}

// Strides kSortTile/2 .. 1 of stage k (> kSortTile) within each tile.
__global__ void bitonic_tile_merge_k(unsigned long long* keys, int64_t k) {
  __shared__ unsigned long long s[kSortTile];
  const int64_t base = int64_t(blockIdx.x) * kSortTile;
  const int t = threadIdx.x;
  s[t] = keys[base + t];
  s[t + kSortTile / 2] = keys[base + t + kSortTile / 2];
  __syncthreads();
  const bool up = (base & k) == 0;  // the whole tile lies in one direction block (k > tile)
  for (int j = kSortTile / 2; j > 0; j >>= 1) {
    const int i = 2 * t - (t & (j - 1));
    cmp_swap(s[i], s[i + j], up);
    __syncthreads();
  }
  keys[base + t] = s[t];
  keys[base + t + kSortTile / 2] = s[t + kSortTile / 2];
}

// One stride j (>= kSortTile) of stage k over all pairs.
__global__ void bitonic_global_k(unsigned long long* keys, int64_t Np, int64_t j, int64_t k) {
  CLM_GRID_STRIDE(t, Np / 2) {
    const int64_t i = 2 * t - (t & (j - 1));
    unsigned long long a = keys[i], b = keys[i + j];
    cmp_swap(a, b, (i & k) == 0);
    keys[i] = a;
    keys[i + j] = b;
  }
}

// Block x = sorted position; only the first position of each token's run works: it adds that
// token's rows, in position order, onto dwte's row.
__global__ void emb_bwd_runs_k(const unsigned long long* keys, const float* dout, float* dwte,
                               int64_t N, int64_t C) {
  const int64_t i = blockIdx.x;
  const unsigned long long tk = keys[i] >> 32;
  if (i > 0 && (keys[i - 1] >> 32) == tk) return;
  float* dst = dwte + int64_t(tk) * C;
  for (int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; c < C;
       c += int64_t(gridDim.y) * blockDim.x) {
    float acc = dst[c];
    for (int64_t j = i; j < N && (keys[j] >> 32) == tk; ++j)
      acc += dout[int64_t(keys[j] & 0xffffffffull) * C + c];
    dst[c] = acc;
  }
}

int64_t sort_size(int64_t N) {
  int64_t p = kSortTile;
  while (p < N) p <<= 1;
  return p;
}

// ---- token embedding with token smearing ----------------------------------------------------------
// The gate of a token's row e, summed in the CPU's order (c = 0..k-1).
__device__ __forceinline__ float smear_gate(const float* e, const float* g, int k) {
  float z = 0;
  for (int c = 0; c < k; ++c) z += g[c] * e[c];
  return 1.0f / (1.0f + expf(-z));
}

// One block per position.
__global__ void embed_smear_fwd_k(EmbedSmearArgs a) {
  const int64_t n = blockIdx.x, C = a.C;
  const float* e = a.wte + int64_t(a.tok[n]) * C;
  float* o = a.out + n * C;
  const int32_t pv = a.prev[n];
  const float f = pv < 0 ? 0.0f : a.w[0] * smear_gate(e, a.w + 1, a.k);
  const float* p = a.wte + int64_t(pv < 0 ? a.tok[n] : pv) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = pv < 0 ? e[c] : e[c] + f * p[c];
}

// One block per position: the factor on the previous row f = lam s, dz (the gate logit's
// gradient), the position's share of (d lam, d g) in double, and the two rows' gradients g1 (for
// wte[tok]) and g2 (for wte[prev], zero without one); prev_or_tok names g2's table row.
__global__ void embed_smear_bwd_rows_k(EmbedSmearBwdArgs a, double* part, float* g1, float* g2,
                                       int32_t* prev_or_tok) {
  __shared__ float sh[32];
  const int64_t n = blockIdx.x, C = a.C;
  const int k = a.k;
  const int32_t pv = a.prev[n];
  const float* e = a.wte + int64_t(a.tok[n]) * C;
  const float* d = a.dout + n * C;
  float u = 0;
  if (pv >= 0) {
    const float* p = a.wte + int64_t(pv) * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) u += d[c] * p[c];
  }
  u = block_sum(u, sh);
  const float s = pv < 0 ? 0.0f : smear_gate(e, a.w + 1, k);
  const float f = a.w[0] * s, dz = pv < 0 ? 0.0f : a.w[0] * u * s * (1.0f - s);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    g1[n * C + c] = d[c] + (c < k ? dz * a.w[1 + c] : 0.0f);
    g2[n * C + c] = f * d[c];
  }
  for (int j = threadIdx.x; j <= k; j += blockDim.x)
    part[n * (1 + k) + j] = j == 0 ? double(s) * u : double(dz) * e[j - 1];
  if (threadIdx.x == 0) prev_or_tok[n] = pv < 0 ? a.tok[n] : pv;
}

// dw[j] += the positions' shares in position order, one thread per parameter.
__global__ void embed_smear_dw_k(const double* part, int64_t N, int k, float* dw) {
  for (int j = threadIdx.x; j <= k; j += blockDim.x) {
    double acc = 0;
    for (int64_t n = 0; n < N; ++n) acc += part[n * (1 + k) + j];
    dw[j] += float(acc);
  }
}

// ---- RMSNorm ------------------------------------------------------------------------------------
// One block per row: rstd = 1/sqrt(mean(x^2) + eps), y = x * rstd (* g).
template <typename OutT>
// With res, the row is x + res, stored to sum first by the thread that later reads it back.
__global__ void rmsnorm_fwd_k(const float* x, const float* res, float* sum, const float* g, OutT* y, float* rstd,
                              int64_t C, float eps) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * C;
  OutT* yr = y + r * C;
  float ss = 0;
  if (res) {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const float v = xr[c] + res[r * C + c];
      sum[r * C + c] = v;
      ss += v * v;
    }
    xr = sum + r * C;
  } else {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss += xr[c] * xr[c];
  }
  ss = block_sum(ss, sh);
  const float s = 1.0f / sqrtf(ss / float(C) + eps);
  if (rstd && threadIdx.x == 0) rstd[r] = s;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    put(yr + c, g ? xr[c] * s * g[c] : xr[c] * s);
}

// dx += s g dy - x s^3/C sum(dy g x); gain partials per row chunk: part[chunk][c] = sum dy x s.
// One block per chunk of rows (rows [r0, r1) in order); each thread owns the columns c = tid + k
// blockDim, in the partials too, so no two threads touch one element.
__global__ void rmsnorm_bwd_k(const float* x, const float* g, const float* rstd, const float* dy,
                              float* dx, float* part, int64_t rows, int64_t C, int64_t chunks) {
  __shared__ float sh[32];
  const int64_t ch = blockIdx.x;
  const int64_t r0 = rows * ch / chunks, r1 = rows * (ch + 1) / chunks;
  float* pg = part ? part + ch * C : nullptr;
  if (pg)
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) pg[c] = 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * C;
    const float* dyr = dy + r * C;
    float* dxr = dx + r * C;
    const float s = rstd[r];
    float dot = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      dot += g ? dyr[c] * g[c] * xr[c] : dyr[c] * xr[c];
    dot = block_sum(dot, sh);
    const float k = dot * s * s * s / float(C);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      if (g) {
        dxr[c] += s * g[c] * dyr[c] - k * xr[c];
        if (pg) pg[c] += dyr[c] * xr[c] * s;
      } else {
        dxr[c] += s * dyr[c] - k * xr[c];
      }
    }
  }
}

// ---- RoPE ---------------------------------------------------------------------------------------
__global__ void rope_k(float* x, int64_t rows, int T, int hd, const float* cos_t,
                       const float* sin_t, int pos0) {
  const int h2 = hd / 2;
  CLM_GRID_STRIDE(idx, rows * h2) {
    const int64_t r = idx / h2;
    const int i = int(idx - r * h2);
    const int64_t pos = pos0 + r % T;
    const float c = cos_t[pos * h2 + i], s = sin_t[pos * h2 + i];
    float* xr = x + r * hd;
    const float a = xr[i], b = xr[i + h2];
    xr[i] = a * c - b * s;
    xr[i + h2] = a * s + b * c;
  }
}

// ---- fused qkv head stage -----------------------------------------------------------------------
// One warp per (token row n, head column block j): j < H are q heads, then Hkv k heads, then Hkv v
// heads (copied). The warp index is the same for all 32 lanes, so whole warps exit together.
__global__ void qkv_fwd_k(const float* qkv, const float* ve, const int32_t* tok, int B, int T, int H, int Hkv,
                          int hd, bool qk_norm,
                          const float* qg, const float* kg, float eps, const float* cos_t,
                          const float* sin_t, float* qraw, float* kraw, float* q_rstd,
                          float* k_rstd, float* q, float* k, float* v) {
  const int nj = H + 2 * Hkv;
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t N = int64_t(B) * T;
  if (w >= N * nj) return;
  const int64_t n = w / nj, b = n / T, t = n % T;
  const int j = int(w - n * nj);
  const float* src = qkv + n * nj * int64_t(hd) + int64_t(j) * hd;
  if (j >= H + Hkv) {
    const int h = j - H - Hkv;
    float* dst = v + ((b * Hkv + h) * T + t) * hd;
    const float* e = ve ? ve + (int64_t(tok[n]) * Hkv + h) * hd : nullptr;
    for (int d = lane; d < hd; d += 32) dst[d] = e ? src[d] + e[d] : src[d];
    return;
  }
  const bool isq = j < H;
  const int h = isq ? j : j - H, nh = isq ? H : Hkv;
  const int64_t hrow = (b * nh + h) * T + t;  // row in [B, nh, T]
  float* dst = (isq ? q : k) + hrow * hd;
  const float* g = isq ? qg : kg;
  float s = 1.0f;
  if (qk_norm) {
    float* raw = (isq ? qraw : kraw) + hrow * hd;
    float ss = 0;
    for (int d = lane; d < hd; d += 32) {
      const float xv = src[d];
      raw[d] = xv;
      ss += xv * xv;
    }
    ss = warp_sum(ss);
    s = 1.0f / sqrtf(ss / float(hd) + eps);
    if (lane == 0) (isq ? q_rstd : k_rstd)[hrow] = s;
  }
  const int h2 = hd / 2;
  const float* cs = cos_t + t * h2;
  const float* sn = sin_t + t * h2;
  for (int i = lane; i < h2; i += 32) {
    float a = src[i] * s, c = src[i + h2] * s;
    if (qk_norm && g) {
      a *= g[i];
      c *= g[i + h2];
    }
    dst[i] = a * cs[i] - c * sn[i];
    dst[i + h2] = a * sn[i] + c * cs[i];
  }
}

// Gradient before RoPE at element d of a head row (the inverse rotation of gsrc).
__device__ __forceinline__ float unrotate(const float* gsrc, const float* cs, const float* sn,
                                          int d, int h2) {
  if (d < h2) return gsrc[d] * cs[d] + gsrc[d + h2] * sn[d];
  const int i = d - h2;
  return -gsrc[i] * sn[i] + gsrc[d] * cs[i];
}

template <typename OutT>
__global__ void qkv_bwd_k(const float* dq, const float* dk, const float* dv, const float* qraw,
                          const float* kraw, const float* q_rstd, const float* k_rstd,
                          const float* qg, const float* kg, int B, int T, int H, int Hkv, int hd,
                          bool qk_norm, const float* cos_t, const float* sin_t, OutT* dqkv) {
  const int nj = H + 2 * Hkv;
  const int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t N = int64_t(B) * T;
  if (w >= N * nj) return;
  const int64_t n = w / nj, b = n / T, t = n % T;
  const int j = int(w - n * nj);
  OutT* dst = dqkv + n * nj * int64_t(hd) + int64_t(j) * hd;
  if (j >= H + Hkv) {
    const int h = j - H - Hkv;
    const float* src = dv + ((b * Hkv + h) * T + t) * hd;
    for (int d = lane; d < hd; d += 32) put(dst + d, src[d]);
    return;
  }
  const bool isq = j < H;
  const int h = isq ? j : j - H, nh = isq ? H : Hkv;
  const int64_t hrow = (b * nh + h) * T + t;
  const float* gsrc = (isq ? dq : dk) + hrow * hd;
  const int h2 = hd / 2;
  const float* cs = cos_t + t * h2;
  const float* sn = sin_t + t * h2;
  if (!qk_norm) {
    for (int d = lane; d < hd; d += 32) put(dst + d, unrotate(gsrc, cs, sn, d, h2));
    return;
  }
  const float* x = (isq ? qraw : kraw) + hrow * hd;
  const float* g = isq ? qg : kg;
  const float s = (isq ? q_rstd : k_rstd)[hrow];
  float dot = 0;
  for (int d = lane; d < hd; d += 32) {
    const float gy = unrotate(gsrc, cs, sn, d, h2);
    dot += g ? gy * g[d] * x[d] : gy * x[d];
  }
  dot = warp_sum(dot);
  const float kk = dot * s * s * s / float(hd);
  for (int d = lane; d < hd; d += 32)
    put(dst + d, s * (g ? g[d] : 1.0f) * unrotate(gsrc, cs, sn, d, h2) - kk * x[d]);
}

// Gain-gradient partials of one head kind: rows = B*nh*T head rows in [B, nh, T] order, split in
// `chunks` fixed chunks; part[chunk][d] = sum over the chunk's rows of gy[d] x[d] s.
__global__ void qkv_gain_part_k(const float* dgrad, const float* raw, const float* rstd,
                                int64_t rows, int T, int hd, const float* cos_t, const float* sin_t,
                                int64_t chunks, float* part) {
  const int64_t ch = blockIdx.x;
  const int64_t r0 = rows * ch / chunks, r1 = rows * (ch + 1) / chunks;
  const int h2 = hd / 2;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r % T;
      const float gy = unrotate(dgrad + r * hd, cos_t + t * h2, sin_t + t * h2, d, h2);
      acc += gy * raw[r * hd + d] * rstd[r];
    }
    part[ch * hd + d] = acc;
  }
}

// ---- head layouts -------------------------------------------------------------------------------
__global__ void split_heads_k(const float* x, int64_t ld, float* y, int B, int T, int nh, int hd) {
  CLM_GRID_STRIDE(i, int64_t(B) * nh * T * hd) {  // i walks y: [B, nh, T, hd]
    const int64_t d = i % hd, r = i / hd;
    const int64_t t = r % T, bh = r / T, h = bh % nh, b = bh / nh;
    y[i] = x[(b * T + t) * ld + h * hd + d];
  }
}

template <typename OutT>
__global__ void merge_heads_k(const float* y, OutT* x, int64_t ld, int B, int T, int nh, int hd) {
  CLM_GRID_STRIDE(i, int64_t(B) * T * nh * hd) {  // i walks x's written columns: [B, T, nh, hd]
    const int64_t d = i % hd, r = i / hd;
    const int64_t h = r % nh, bt = r / nh, t = bt % T, b = bt / T;
    put(x + bt * ld + h * hd + d, y[((b * nh + h) * T + t) * hd + d]);
  }
}

// ---- MLP activations ----------------------------------------------------------------------------
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)

// relu2 and gelu act on each element alone (value_of/grad_of, run as element-wise maps); swiglu
// pairs column c of a row's up half with column c of its gate half (its own kernels).
__device__ __forceinline__ float act_value(int act, float v) {
  if (act == 0) {  // relu2
    const float r = v > 0 ? v : 0.0f;
    return r * r;
  }
  const float u = kGeluC * (v + 0.044715f * v * v * v);  // gelu, tanh approximation
  return 0.5f * v * (1.0f + tanhf(u));
}
__device__ __forceinline__ float act_grad(int act, float v, float dy) {
  if (act == 0) return v > 0 ? 2.0f * v * dy : 0.0f;
  const float u = kGeluC * (v + 0.044715f * v * v * v);
  const float th = tanhf(u);
  const float du = kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
  return dy * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du);
}
struct ActValue {
  int act;
  __device__ float operator()(float v) const { return act_value(act, v); }
};
struct ActGrad {
  int act;
  __device__ float operator()(float v, float dy) const { return act_grad(act, v, dy); }
};

template <typename OutT>
__global__ void swiglu_fwd_k(const float* h, OutT* y, int64_t N, int64_t Hd) {
  CLM_GRID_STRIDE(i, N * Hd) {
    const int64_t n = i / Hd, c = i - n * Hd;
    const float up = h[n * 2 * Hd + c], g = h[n * 2 * Hd + Hd + c];
    const float sg = 1.0f / (1.0f + expf(-g));
    put(y + i, up * g * sg);
  }
}

template <typename OutT>
__global__ void swiglu_bwd_k(const float* h, const float* dy, OutT* dh, int64_t N, int64_t Hd) {
  CLM_GRID_STRIDE(i, N * Hd) {
    const int64_t n = i / Hd, c = i - n * Hd;
    const float up = h[n * 2 * Hd + c], g = h[n * 2 * Hd + Hd + c];
    const float sg = 1.0f / (1.0f + expf(-g));
    put(dh + n * 2 * Hd + c, dy[i] * g * sg);
    put(dh + n * 2 * Hd + Hd + c, dy[i] * up * sg * (1.0f + g * (1.0f - sg)));
  }
}

// ---- element-wise -------------------------------------------------------------------------------
struct Add {
  __device__ float operator()(float x, float y) const { return x + y; }
};
struct Scale {
  float s;
  __device__ float operator()(float x) const { return x * s; }
};
struct Axpy {  // y + a x
  float a;
  __device__ float operator()(float y, float x) const { return y + a * x; }
};
struct Mix2 {  // w[0] x + w[1] x0, the weights read on the device
  const float* w;
  __device__ float operator()(float x, float x0) const { return w[0] * x + w[1] * x0; }
};
struct Softcap {
  float cap, inv;
  __device__ float operator()(float z) const { return cap * tanhf(z * inv); }
};
// One block per 16K-element chunk (the CPU's chunks): the element-wise part, and the chunk's two
// sums in double into part[2c], part[2c+1].
constexpr int64_t kMixChunk = 16384;
__global__ void mix2_bwd_k(const float* dout, const float* x, const float* x0, const float* w, float* dx,
                           float* dx0, int64_t n, double* part) {
  __shared__ double sh[32];
  const float a = w[0], b = w[1];
  const int64_t lo = int64_t(blockIdx.x) * kMixChunk, hi = lo + kMixChunk < n ? lo + kMixChunk : n;
  double sx = 0, sx0 = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const float g = dout[i];
    sx += double(g) * x[i];
    sx0 += double(g) * x0[i];
    dx0[i] += b * g;
    dx[i] = a * g;
  }
  sx = block_sum(sx, sh);
  sx0 = block_sum(sx0, sh);
  if (threadIdx.x == 0) part[2 * blockIdx.x] = sx, part[2 * blockIdx.x + 1] = sx0;
}
__global__ void mix2_total_k(const double* part, int64_t chunks, float* dw) {
  __shared__ double sh[32];
  double sx = 0, sx0 = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) sx += part[2 * c], sx0 += part[2 * c + 1];
  sx = block_sum(sx, sh);
  sx0 = block_sum(sx0, sh);
  if (threadIdx.x == 0) dw[0] += float(sx), dw[1] += float(sx0);
}

// ---- softcap + cross-entropy --------------------------------------------------------------------
// Running (max, sum of exp(x - max), first index of the max) of a sequence; merge() is symmetric in
// its two arguments (bit for bit), so butterfly partners agree.
struct LseState {
  float m, s;
  int i;
};
__device__ __forceinline__ LseState lse_merge(LseState a, LseState b) {
  LseState r;
  r.m = fmaxf(a.m, b.m);
  r.s = r.m == -INFINITY ? 0.0f : a.s * expf(a.m - r.m) + b.s * expf(b.m - r.m);
  r.i = a.m > b.m ? a.i : (b.m > a.m ? b.i : min(a.i, b.i));
  return r;
}

// The gradient of one softcapped logit s before the target's one-hot term, and that term; the
// fp32 and bf16 outputs take both from here, the term subtracted with __fsub_rn (never fused into
// an FMA), so the bf16 gradient is exactly the fp32 one rounded.
__device__ __forceinline__ float xent_grad(float s, float lse, float gs, bool capped, float inv) {
  const float ds = expf(s - lse) * gs;
  return capped ? ds * (1.0f - (s * inv) * (s * inv)) : ds;
}
__device__ __forceinline__ float one_hot_term(float s_target, float gs, bool capped, float inv) {
  return capped ? __fmul_rn(gs, 1.0f - (s_target * inv) * (s_target * inv)) : gs;
}

// One block per row: softcap in place (z becomes s, as on the CPU), one pass for the max, the sum
// of exponentials and the argmax (online), then the loss and, with want_grad, the gradient: in
// place in z, or with g16 set in bf16 into g16 only (z then keeps the softcapped logits), which
// saves the separate conversion pass over the whole gradient.
constexpr int kXentThreads = 512;
__global__ void __launch_bounds__(kXentThreads)
    softcap_xent_k(float* logits, const int32_t* targets, int V, int Vp, int64_t ld, float cap, float* L,
                   int32_t* argmax, bool want_grad, float gs, uint16_t* g16_all) {
  __shared__ LseState sh[kXentThreads / 32];
  const int64_t n = blockIdx.x;
  float* z = logits + n * ld;
  const bool capped = cap > 0;
  const float inv = capped ? 1.0f / cap : 0.0f;
  LseState st{-INFINITY, 0.0f, INT_MAX};
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float v = z[j];
    if (capped) {
      v = cap * tanhf(v * inv);
      z[j] = v;
    }
    if (v > st.m) {
      st.s = st.s * expf(st.m - v) + 1.0f;  // st.s is 0 while st.m is -inf
      st.m = v;
      st.i = j;
    } else if (st.m != -INFINITY) {
      st.s += expf(v - st.m);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    LseState other{__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o),
                   __shfl_xor_sync(0xffffffffu, st.i, o)};
    st = lse_merge(st, other);
  }
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = st;
  __syncthreads();  // also makes the softcapped z visible to the whole block
  st = sh[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) st = lse_merge(st, sh[w]);
  const float lse = st.m + logf(st.s);
  const int32_t tg = targets ? targets[n] : -1;
  const float loss = tg >= 0 ? lse - z[tg] : 0.0f;
  if (threadIdx.x == 0) {
    L[n] = loss;
    if (argmax) argmax[n] = st.i == INT_MAX ? V - 1 : st.i;
  }
  if (!want_grad) return;
  // The target's softcapped logit as the one-hot term reads it (lse - loss, as the CPU forms it).
  const float term = tg >= 0 ? one_hot_term(lse - loss, gs, capped, inv) : 0.0f;
  if (g16_all) {
    uint16_t* g16 = g16_all + n * ld;
    for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
      float v = 0.0f;
      if (tg >= 0 && j < V) {
        v = xent_grad(z[j], lse, gs, capped, inv);
        if (j == tg) v = __fsub_rn(v, term);
      }
      g16[j] = bf16_round(v);
    }
    return;
  }
  __syncthreads();  // every thread has read z[tg] before it is overwritten
  if (tg < 0) {
    for (int j = threadIdx.x; j < Vp; j += blockDim.x) z[j] = 0.0f;
    return;
  }
  for (int j = threadIdx.x; j < V; j += blockDim.x) z[j] = xent_grad(z[j], lse, gs, capped, inv);
  for (int j = V + threadIdx.x; j < Vp; j += blockDim.x) z[j] = 0.0f;
  __syncthreads();
  if (threadIdx.x == 0) z[tg] = __fsub_rn(z[tg], term);
}

// *total += the sum of L[n] over rows with a target >= 0 (double; strided partials, one fixed tree).
__global__ void sum_losses_k(const float* L, const int32_t* targets, int64_t N, double* total) {
  __shared__ double sh[32];
  double acc = 0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x)
    if (!targets || targets[n] >= 0) acc += double(L[n]);
  acc = block_sum(acc, sh);
  if (threadIdx.x == 0) *total += acc;  // the accumulator of a head pass's chunks
}

}  // namespace

// ==== launchers ==================================================================================
void embedding_fwd(cudaStream_t st, const int32_t* tok, const float* wte, float* out, int64_t N,
                   int64_t C) {
  if (N * C == 0) return;
  embedding_fwd_k<<<grid_for(N * C), kThreads, 0, st>>>(tok, wte, out, N, C);
}

size_t embedding_bwd_scratch(int64_t N) { return size_t(sort_size(N)) * 8; }

void embedding_bwd(cudaStream_t st, const int32_t* tok, const float* dout, float* dwte, int64_t N,
                   int64_t C, void* scratch) {
  if (N == 0 || C == 0) return;
  const int64_t Np = sort_size(N);
  auto* keys = static_cast<unsigned long long*>(scratch);
  emb_keys_k<<<grid_for(Np), kThreads, 0, st>>>(tok, keys, N, Np);
  bitonic_tile_sort_k<<<unsigned(Np / kSortTile), kSortTile / 2, 0, st>>>(keys);
  for (int64_t k = 2 * kSortTile; k <= Np; k <<= 1) {
    for (int64_t j = k / 2; j >= kSortTile; j >>= 1)
      bitonic_global_k<<<grid_for(Np / 2), kThreads, 0, st>>>(keys, Np, j, k);
    bitonic_tile_merge_k<<<unsigned(Np / kSortTile), kSortTile / 2, 0, st>>>(keys, k);
  }
  const unsigned gy = unsigned(std::min<int64_t>((C + kThreads - 1) / kThreads, 65535));
  emb_bwd_runs_k<<<dim3(unsigned(N), gy), kThreads, 0, st>>>(keys, dout, dwte, N, C);
}

void embed_smear_fwd(cudaStream_t st, const EmbedSmearArgs& a) {
  if (a.N == 0 || a.C == 0) return;
  embed_smear_fwd_k<<<unsigned(a.N), kThreads, 0, st>>>(a);
}

// Scratch: the two gradient rows' buffers, the shares, g2's row indices, then embedding_bwd's sort.
namespace {
struct SmearScratch {
  float *g1, *g2;
  double* part;
  int32_t* rows;
  void* sort;
};
// Byte offsets of the parts from the scratch's start, each 256-aligned; `sort` is also the size of
// what comes before embedding_bwd's scratch.
struct SmearOffsets {
  size_t g1, g2, part, rows, sort;
};
SmearOffsets smear_offsets(int64_t N, int64_t C, int k) {
  auto up = [](size_t b) { return (b + 255) / 256 * 256; };
  SmearOffsets o{};
  o.g2 = o.g1 + up(size_t(N * C) * 4);
  o.part = o.g2 + up(size_t(N * C) * 4);
  o.rows = o.part + up(size_t(N) * size_t(1 + k) * 8);
  o.sort = o.rows + up(size_t(N) * 4);
  return o;
}
SmearScratch carve_smear(void* base, int64_t N, int64_t C, int k) {
  char* p = static_cast<char*>(base);
  const SmearOffsets o = smear_offsets(N, C, k);
  return {reinterpret_cast<float*>(p + o.g1), reinterpret_cast<float*>(p + o.g2),
          reinterpret_cast<double*>(p + o.part), reinterpret_cast<int32_t*>(p + o.rows), p + o.sort};
}
}  // namespace

size_t embed_smear_bwd_scratch(int64_t N, int64_t C, int k) {
  return smear_offsets(N, C, k).sort + embedding_bwd_scratch(N);
}

void embed_smear_bwd(cudaStream_t st, const EmbedSmearBwdArgs& a, void* scratch) {
  if (a.N == 0 || a.C == 0) return;
  const SmearScratch s = carve_smear(scratch, a.N, a.C, a.k);
  embed_smear_bwd_rows_k<<<unsigned(a.N), kThreads, 0, st>>>(a, s.part, s.g1, s.g2, s.rows);
  embed_smear_dw_k<<<1, 32, 0, st>>>(s.part, a.N, a.k, a.dw);
  embedding_bwd(st, a.tok, s.g1, a.dwte, a.N, a.C, s.sort);
  embedding_bwd(st, s.rows, s.g2, a.dwte, a.N, a.C, s.sort);
}

void rmsnorm_fwd(cudaStream_t st, const float* x, const float* res, float* sum, const float* g, void* y, bool y_bf16,
                 float* rstd, int64_t rows, int64_t C, float eps) {
  if (rows == 0) return;
  if (y_bf16)
    rmsnorm_fwd_k<<<unsigned(rows), kThreads, 0, st>>>(x, res, sum, g, static_cast<uint16_t*>(y), rstd, C, eps);
  else
    rmsnorm_fwd_k<<<unsigned(rows), kThreads, 0, st>>>(x, res, sum, g, static_cast<float*>(y), rstd, C, eps);
}

size_t rmsnorm_bwd_scratch(int64_t rows, int64_t C) {
  return size_t(std::min(rows, kNormChunks)) * size_t(C) * 4;
}

void rmsnorm_bwd(cudaStream_t st, const float* x, const float* g, const float* rstd,
                 const float* dy, float* dx, float* dg, int64_t rows, int64_t C, void* scratch) {
  if (rows == 0) return;
  const int64_t chunks = std::min(rows, kNormChunks);
  float* part = g && dg ? static_cast<float*>(scratch) : nullptr;
  rmsnorm_bwd_k<<<unsigned(chunks), kThreads, 0, st>>>(x, g, rstd, dy, dx, part, rows, C, chunks);
  if (part) add_column_partials_k<<<grid_for(C), kThreads, 0, st>>>(part, chunks, C, dg);
}

void rope_fwd(cudaStream_t st, float* x, int64_t rows, int T, int hd, const float* cos_t,
              const float* sin_t, int pos0) {
  if (rows * (hd / 2) == 0) return;
  rope_k<<<grid_for(rows * (hd / 2)), kThreads, 0, st>>>(x, rows, T, hd, cos_t, sin_t, pos0);
}

void qkv_heads_fwd(cudaStream_t st, const float* qkv, const float* ve, const int32_t* tok, int B, int T, int H,
                   int Hkv, int hd, bool qk_norm, const float* qg, const float* kg, float eps, const float* cos_t,
                   const float* sin_t, float* qraw, float* kraw, float* q_rstd, float* k_rstd,
                   float* q, float* k, float* v) {
  const int64_t warps = int64_t(B) * T * (H + 2 * Hkv);
  if (warps == 0) return;
  const unsigned blocks = unsigned((warps * 32 + kThreads - 1) / kThreads);
  qkv_fwd_k<<<blocks, kThreads, 0, st>>>(qkv, ve, tok, B, T, H, Hkv, hd, qk_norm, qg, kg, eps, cos_t, sin_t,
                                         qraw, kraw, q_rstd, k_rstd, q, k, v);
}

size_t qkv_heads_bwd_scratch(int B, int T, int H, int Hkv, int hd) {
  const int64_t rq = int64_t(B) * H * T, rk = int64_t(B) * Hkv * T;
  return size_t(std::min(rq, kHeadChunks) + std::min(rk, kHeadChunks)) * size_t(hd) * 4;
}

void qkv_heads_bwd(cudaStream_t st, const float* dq, const float* dk, const float* dv,
                   const float* qraw, const float* kraw, const float* q_rstd, const float* k_rstd,
                   const float* qg, const float* kg, float* dqg, float* dkg, int B, int T, int H,
                   int Hkv, int hd, bool qk_norm, const float* cos_t, const float* sin_t,
                   void* dqkv, bool out_bf16, void* scratch) {
  const int64_t warps = int64_t(B) * T * (H + 2 * Hkv);
  if (warps == 0) return;
  const unsigned blocks = unsigned((warps * 32 + kThreads - 1) / kThreads);
  if (out_bf16)
    qkv_bwd_k<<<blocks, kThreads, 0, st>>>(dq, dk, dv, qraw, kraw, q_rstd, k_rstd, qg, kg, B, T, H,
                                           Hkv, hd, qk_norm, cos_t, sin_t,
                                           static_cast<uint16_t*>(dqkv));
  else
    qkv_bwd_k<<<blocks, kThreads, 0, st>>>(dq, dk, dv, qraw, kraw, q_rstd, k_rstd, qg, kg, B, T, H,
                                           Hkv, hd, qk_norm, cos_t, sin_t,
                                           static_cast<float*>(dqkv));
  if (!(qk_norm && qg && kg && dqg && dkg)) return;
  // Gains: more chunks than the norms (head rows are short), a fixed number for a given shape.
  const int threads = std::min(kThreads, (hd + 31) / 32 * 32);
  const int64_t rq = int64_t(B) * H * T, rk = int64_t(B) * Hkv * T;
  const int64_t cq = std::min(rq, kHeadChunks), ck = std::min(rk, kHeadChunks);
  float* pq = static_cast<float*>(scratch);
  float* pk = pq + cq * hd;
  qkv_gain_part_k<<<unsigned(cq), threads, 0, st>>>(dq, qraw, q_rstd, rq, T, hd, cos_t, sin_t, cq,
                                                    pq);
  qkv_gain_part_k<<<unsigned(ck), threads, 0, st>>>(dk, kraw, k_rstd, rk, T, hd, cos_t, sin_t, ck,
                                                    pk);
  add_column_partials_k<<<grid_for(hd), kThreads, 0, st>>>(pq, cq, hd, dqg);
  add_column_partials_k<<<grid_for(hd), kThreads, 0, st>>>(pk, ck, hd, dkg);
}

void split_heads(cudaStream_t st, const SplitHeadsArgs& a) {
  const int64_t n = int64_t(a.B) * a.nh * a.T * a.hd;
  if (n == 0) return;
  split_heads_k<<<grid_for(n), kThreads, 0, st>>>(a.x, a.ld, a.y, a.B, a.T, a.nh, a.hd);
}

void merge_heads(cudaStream_t st, const MergeHeadsArgs& a) {
  const int64_t n = int64_t(a.B) * a.nh * a.T * a.hd;
  if (n == 0) return;
  if (a.out_t == DType::BF16)
    merge_heads_k<<<grid_for(n), kThreads, 0, st>>>(a.y, static_cast<uint16_t*>(a.x), a.ld, a.B, a.T, a.nh,
                                                    a.hd);
  else
    merge_heads_k<<<grid_for(n), kThreads, 0, st>>>(a.y, static_cast<float*>(a.x), a.ld, a.B, a.T, a.nh, a.hd);
}

// Element-wise activation into an fp32 or bf16 output: one launcher for both output types.
template <typename OutT>
void activation_fwd_to(cudaStream_t st, int act, const float* h, OutT* y, int64_t N, int64_t Hd) {
  if (act == 2)
    swiglu_fwd_k<<<grid_for(N * Hd), kThreads, 0, st>>>(h, y, N, Hd);
  else
    launch_map(st, Map1<ActValue, float, OutT>{h, y, ActValue{act}}, N * Hd);
}
template <typename OutT>
void activation_bwd_to(cudaStream_t st, int act, const float* h, const float* dy, OutT* dh, int64_t N,
                       int64_t Hd) {
  if (act == 2)
    swiglu_bwd_k<<<grid_for(N * Hd), kThreads, 0, st>>>(h, dy, dh, N, Hd);
  else
    launch_map(st, Map2<ActGrad, OutT>{h, dy, dh, ActGrad{act}}, N * Hd);
}

void activation_fwd(cudaStream_t st, int act, const float* h, void* y, bool y_bf16, int64_t N,
                    int64_t Hd) {
  if (N * Hd == 0) return;
  if (y_bf16)
    activation_fwd_to(st, act, h, static_cast<uint16_t*>(y), N, Hd);
  else
    activation_fwd_to(st, act, h, static_cast<float*>(y), N, Hd);
}

void activation_bwd(cudaStream_t st, int act, const float* h, const float* dy, void* dh,
                    bool dh_bf16, int64_t N, int64_t Hd) {
  if (N * Hd == 0) return;
  if (dh_bf16)
    activation_bwd_to(st, act, h, dy, static_cast<uint16_t*>(dh), N, Hd);
  else
    activation_bwd_to(st, act, h, dy, static_cast<float*>(dh), N, Hd);
}

void residual_fwd(cudaStream_t st, const float* a, const float* b, float* out, int64_t n) {
  launch_map(st, Map2<Add, float>{a, b, out, Add{}}, n);
}
void mix2_fwd(cudaStream_t st, const float* x, const float* x0, const float* w, float* out, int64_t n) {
  launch_map(st, Map2<Mix2, float>{x, x0, out, Mix2{w}}, n);
}
size_t mix2_bwd_scratch(int64_t n) { return size_t(std::max<int64_t>((n + kMixChunk - 1) / kMixChunk, 1)) * 16; }
void mix2_bwd(cudaStream_t st, const float* dout, const float* x, const float* x0, const float* w, float* dx,
              float* dx0, float* dw, int64_t n, void* scratch) {
  if (n <= 0) return;
  const int64_t chunks = (n + kMixChunk - 1) / kMixChunk;
  auto* part = static_cast<double*>(scratch);
  mix2_bwd_k<<<unsigned(chunks), kThreads, 0, st>>>(dout, x, x0, w, dx, dx0, n, part);
  mix2_total_k<<<1, 1024, 0, st>>>(part, chunks, dw);
}
void scale(cudaStream_t st, float* x, float s, int64_t n) {
  launch_map(st, Map1<Scale, float, float>{x, x, Scale{s}}, n);
}
void axpy(cudaStream_t st, float* y, float a, const float* x, int64_t n) {
  launch_map(st, Map2<Axpy, float>{y, x, y, Axpy{a}}, n);
}
void softcap_fwd(cudaStream_t st, float* z, int64_t n, float cap) {
  if (cap <= 0 || n == 0) return;
  launch_map(st, Map1<Softcap, float, float>{z, z, Softcap{cap, 1.0f / cap}}, n);
}

size_t softcap_xent_scratch(int64_t N) { return size_t(std::max<int64_t>(N, 1)) * 4; }

void softcap_xent(cudaStream_t st, float* logits, const int32_t* targets, int64_t N, int V, int Vp,
                  int64_t ld, float cap, float* loss, int32_t* argmax, bool want_grad, float grad_scale,
                  bf16_t* grad_bf16, void* scratch, double* total) {
  float* L = loss ? loss : static_cast<float*>(scratch);
  if (N > 0)
    softcap_xent_k<<<unsigned(N), kXentThreads, 0, st>>>(logits, targets, V, Vp, ld, cap, L, argmax,
                                                         want_grad, grad_scale, grad_bf16);
  if (total) sum_losses_k<<<1, 1024, 0, st>>>(L, targets, N, total);
}

}  // namespace clm::cuda

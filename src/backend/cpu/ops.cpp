// Elementwise and row-wise layers of the GPT (embedding, RMSNorm, linear wrappers, RoPE, MLP
// activations, residual add, softcapped cross-entropy). Attention lives in attention.cpp.
// All loops are OpenMP-static or have no cross-iteration reductions, so results depend only on the
// thread count. Reductions over rows (norm gains) use per-thread partials summed in thread order.
// A kernel variant source (kernel_isa.h): compiled once per instruction-set level, the loops are
// plain C++ that the compiler vectorises for that level; ops.h's functions forward here.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <omp.h>

#include "backend/cpu/kernel_isa.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/vmath.h"

CLM_ISA_BEGIN

namespace {
// Store one value into an fp32 or a bf16 (round-to-nearest-even) output; branch-free, so loops that
// use it vectorise.
inline void put(float* p, float v) { *p = v; }
inline void put(bf16* p, float v) {
  uint32_t u = __builtin_bit_cast(uint32_t, v);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  *p = bf16(((u & 0x7fffffffu) > 0x7f800000u) ? ((u >> 16) | 0x40) : r);
}
}  // namespace

// --- embedding ------------------------------------------------------------------------------------
void embedding_fwd(const int32_t* tok, const float* wte, float* out, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * C, wte + int64_t(tok[n]) * C, C * 4);
}

void embedding_bwd(const int32_t* tok, const float* dout, float* dwte, int64_t N, int64_t C) {
  // Split the columns between threads: each thread scatters every token into its own column slice,
  // so repeated tokens never race and the summation order is fixed (token order).
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t c0 = C * t / nt, c1 = C * (t + 1) / nt;
    for (int64_t n = 0; n < N; ++n) {
      float* dst = dwte + int64_t(tok[n]) * C;
      const float* src = dout + n * C;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

// --- token embedding with token smearing ----------------------------------------------------------
namespace {
// The smear gate of a token's embedding row e: sigmoid(sum_{c<k} g[c] e[c]).
inline float smear_gate(const float* e, const float* g, int k) {
  float z = 0;
  for (int c = 0; c < k; ++c) z += g[c] * e[c];
  return 1.0f / (1.0f + std::exp(-z));
}
}  // namespace

void embed_smear_fwd(const EmbedSmearArgs& a) {
  const int64_t C = a.C;
  const float lam = a.w[0];
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < a.N; ++n) {
    const float* e = a.wte + int64_t(a.tok[n]) * C;
    float* o = a.out + n * C;
    if (a.prev[n] < 0) {
      std::memcpy(o, e, size_t(C) * 4);
      continue;
    }
    const float* p = a.wte + int64_t(a.prev[n]) * C;
    const float f = lam * smear_gate(e, a.w + 1, a.k);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = e[c] + f * p[c];
  }
}

void embed_smear_bwd(const EmbedSmearBwdArgs& a) {
  const int64_t N = a.N, C = a.C;
  const int k = a.k;
  const float lam = a.w[0];
  const float* g = a.w + 1;
  // Pass 1, per position: the factor on the previous row (lam s) and the gate logit's gradient dz,
  // and the parameter sums over fixed chunks of positions in double, added in chunk order.
  constexpr int64_t kChunk = 256;
  const int64_t nchunks = (N + kChunk - 1) / kChunk;
  std::vector<float> f(static_cast<size_t>(N)), dz(static_cast<size_t>(N));
  std::vector<double> part(static_cast<size_t>(nchunks * (1 + k)), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < nchunks; ++ch) {
    double* ps = part.data() + ch * (1 + k);
    for (int64_t n = ch * kChunk, hi = std::min(N, (ch + 1) * kChunk); n < hi; ++n) {
      f[size_t(n)] = dz[size_t(n)] = 0;
      if (a.prev[n] < 0) continue;
      const float* e = a.wte + int64_t(a.tok[n]) * C;
      const float* p = a.wte + int64_t(a.prev[n]) * C;
      const float* d = a.dout + n * C;
      float u = 0;
#pragma omp simd reduction(+ : u)
      for (int64_t c = 0; c < C; ++c) u += d[c] * p[c];
      const float s = smear_gate(e, g, k);
      f[size_t(n)] = lam * s;
      dz[size_t(n)] = lam * u * s * (1.0f - s);
      ps[0] += double(s) * u;
      for (int c = 0; c < k; ++c) ps[1 + c] += double(dz[size_t(n)]) * e[c];
    }
  }
  for (int64_t ch = 0; ch < nchunks; ++ch)
    for (int j = 0; j <= k; ++j) a.dw[j] += float(part[size_t(ch * (1 + k) + j)]);
  // Pass 2: the rows' gradients, each thread owning a slice of the columns (embedding_bwd's rule).
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t c0 = C * t / nt, c1 = C * (t + 1) / nt;
    for (int64_t n = 0; n < N; ++n) {
      const float* d = a.dout + n * C;
      float* de = a.dwte + int64_t(a.tok[n]) * C;
      for (int64_t c = c0; c < c1; ++c) de[c] += d[c] + (c < k ? dz[size_t(n)] * g[c] : 0.0f);
      if (a.prev[n] < 0) continue;
      float* dp = a.dwte + int64_t(a.prev[n]) * C;
      for (int64_t c = c0; c < c1; ++c) dp[c] += f[size_t(n)] * d[c];
    }
  }
}

// --- RMSNorm ----------------------------------------------------------------------------------------
// With `res`, the rows normalised are x + res, stored to `sum` first (the residual add fused in).
template <typename OutT>
static void rmsnorm_fwd_t(const float* x, const float* res, float* sum, const float* g, OutT* y, float* rstd,
                          int64_t rows, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    OutT* yr = y + r * C;
    float ss = 0;
    if (res) {
      const float* rr = res + r * C;
      float* sr = sum + r * C;
#pragma omp simd reduction(+ : ss)
      for (int64_t c = 0; c < C; ++c) {
        const float v = xr[c] + rr[c];
        sr[c] = v;
        ss += v * v;
      }
      xr = sr;
    } else {
#pragma omp simd reduction(+ : ss)
      for (int64_t c = 0; c < C; ++c) ss += xr[c] * xr[c];
    }
    float s = 1.0f / std::sqrt(ss / float(C) + eps);
    if (rstd) rstd[r] = s;
    if (g) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) put(yr + c, xr[c] * s * g[c]);
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) put(yr + c, xr[c] * s);
    }
  }
}

void rmsnorm_fwd(const float* x, const float* g, float* y, float* rstd, int64_t rows, int64_t C,
                 float eps) {
  rmsnorm_fwd_t(x, nullptr, nullptr, g, y, rstd, rows, C, eps);
}
void rmsnorm_fwd(const float* x, const float* g, bf16* y, float* rstd, int64_t rows, int64_t C,
                 float eps) {
  rmsnorm_fwd_t(x, nullptr, nullptr, g, y, rstd, rows, C, eps);
}
void residual_rmsnorm_fwd(const float* x, const float* res, float* sum, const float* g, float* y, float* rstd,
                          int64_t rows, int64_t C, float eps) {
  rmsnorm_fwd_t(x, res, sum, g, y, rstd, rows, C, eps);
}
void residual_rmsnorm_fwd(const float* x, const float* res, float* sum, const float* g, bf16* y, float* rstd,
                          int64_t rows, int64_t C, float eps) {
  rmsnorm_fwd_t(x, res, sum, g, y, rstd, rows, C, eps);
}

// sum_i dy_i g_i x_i (g may be null: 1): the row term of the RMSNorm backward, shared with the fused
// qk-norm backward.
static inline float rms_bwd_dot(const float* dy, const float* g, const float* x, int64_t n) {
  float dot = 0;
  if (g) {
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < n; ++c) dot += dy[c] * g[c] * x[c];
  } else {
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < n; ++c) dot += dy[c] * x[c];
  }
  return dot;
}

void rmsnorm_bwd(const RmsnormBwdArgs& a) {
  const float *x = a.x, *g = a.g, *rstd = a.rstd, *dy = a.dy;
  float *dx = a.dx, *dg = a.dg;
  const int64_t rows = a.rows, C = a.C;
  int nthreads = omp_get_max_threads();
  std::vector<float> partial(g && dg ? size_t(nthreads) * C : 0, 0.0f);
#pragma omp parallel num_threads(nthreads)
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
    float* pg = partial.empty() ? nullptr : partial.data() + size_t(t) * C;
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * C;
      const float* dyr = dy + r * C;
      float* dxr = dx + r * C;
      float s = rstd[r];
      // d/dx_j [x_j s g_j] summed against dy: s*g_j*dy_j - x_j s^3/C * sum_i dy_i g_i x_i
      float k = rms_bwd_dot(dyr, g, xr, C) * s * s * s / float(C);
      if (g) {
        for (int64_t c = 0; c < C; ++c) dxr[c] += s * g[c] * dyr[c] - k * xr[c];
        if (pg)
          for (int64_t c = 0; c < C; ++c) pg[c] += dyr[c] * xr[c] * s;
      } else {
        for (int64_t c = 0; c < C; ++c) dxr[c] += s * dyr[c] - k * xr[c];
      }
    }
  }
  if (!partial.empty())
    for (int t = 0; t < nthreads; ++t)
      for (int64_t c = 0; c < C; ++c) dg[c] += partial[size_t(t) * C + c];
}

// --- RoPE -------------------------------------------------------------------------------------------
void rope_tables(float* cos_t, float* sin_t, int T, int hd, float base) {
  int h2 = hd / 2;
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < h2; ++i) {
      double ang = double(t) * std::pow(double(base), -2.0 * i / double(hd));
      cos_t[t * h2 + i] = float(std::cos(ang));
      sin_t[t * h2 + i] = float(std::sin(ang));
    }
}

static void rope_apply(float* x, int64_t rows, int T, int hd, const float* cos_t,
                       const float* sin_t, int pos0, float sign) {
  int h2 = hd / 2;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t pos = pos0 + r % T;
    const float* c = cos_t + pos * h2;
    const float* s = sin_t + pos * h2;
    float* xr = x + r * hd;
    for (int i = 0; i < h2; ++i) {
      float a = xr[i], b = xr[i + h2];
      float si = sign * s[i];
      xr[i] = a * c[i] - b * si;
      xr[i + h2] = a * si + b * c[i];
    }
  }
}

void rope_fwd(float* x, int64_t rows, int T, int hd, const float* cos_t, const float* sin_t,
              int pos0) {
  rope_apply(x, rows, T, hd, cos_t, sin_t, pos0, 1.0f);
}

void rope_bwd(float* dx, int64_t rows, int T, int hd, const float* cos_t, const float* sin_t,
              int pos0) {
  rope_apply(dx, rows, T, hd, cos_t, sin_t, pos0, -1.0f);  // rotation is orthogonal: R^T = R(-a)
}

// --- head layouts --------------------------------------------------------------------------------
void split_heads(const SplitHeadsArgs& a) {
  const float* x = a.x;
  float* y = a.y;
  const int64_t ld = a.ld;
  const int B = a.B, T = a.T, nh = a.nh, hd = a.hd;
#pragma omp parallel for schedule(static) collapse(2)
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < nh; ++h)
      for (int t = 0; t < T; ++t)
        std::memcpy(y + ((int64_t(b) * nh + h) * T + t) * hd, x + (int64_t(b) * T + t) * ld + h * hd,
                    sizeof(float) * hd);
}

void merge_heads(const float* y, float* x, int64_t ld, int B, int T, int nh, int hd) {
#pragma omp parallel for schedule(static) collapse(2)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < nh; ++h)
        std::memcpy(x + (int64_t(b) * T + t) * ld + h * hd, y + ((int64_t(b) * nh + h) * T + t) * hd,
                    sizeof(float) * hd);
}

void merge_heads(const float* y, bf16* x, int64_t ld, int B, int T, int nh, int hd) {
#pragma omp parallel for schedule(static) collapse(2)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < nh; ++h) {
        bf16* dst = x + (int64_t(b) * T + t) * ld + h * hd;
        const float* src = y + ((int64_t(b) * nh + h) * T + t) * hd;
#pragma omp simd
        for (int d = 0; d < hd; ++d) put(dst + d, src[d]);
      }
}

// --- fused qkv head stage ------------------------------------------------------------------------
void qkv_heads_fwd(const float* qkv, const float* ve, const int32_t* tok, int B, int T, int H, int Hkv, int hd,
                   bool qk_norm, const float* qg, const float* kg, float eps, const float* cos_t,
                   const float* sin_t, float* qraw, float* kraw, float* q_rstd, float* k_rstd,
                   float* q, float* k, float* v) {
  const int64_t ld = int64_t(H + 2 * Hkv) * hd;
  const int h2 = hd / 2;
  const int64_t N = int64_t(B) * T;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    int64_t b = n / T, t = n % T;
    const float* row = qkv + n * ld;
    const float* cs = cos_t + t * h2;
    const float* sn = sin_t + t * h2;
    for (int j = 0; j < H + Hkv; ++j) {  // q heads then k heads
      bool isq = j < H;
      int h = isq ? j : j - H;
      int nh = isq ? H : Hkv;
      int64_t hrow = (b * nh + h) * T + t;  // row index in [B, nh, T]
      const float* src = row + int64_t(j) * hd;
      float* dst = (isq ? q : k) + hrow * hd;
      float s = 1.0f;
      const float* g = isq ? qg : kg;
      if (qk_norm) {
        std::memcpy((isq ? qraw : kraw) + hrow * hd, src, sizeof(float) * hd);
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int d = 0; d < hd; ++d) ss += src[d] * src[d];
        s = 1.0f / std::sqrt(ss / float(hd) + eps);
        (isq ? q_rstd : k_rstd)[hrow] = s;
      }
      for (int i = 0; i < h2; ++i) {
        float a = src[i] * s, c = src[i + h2] * s;
        if (qk_norm && g) {
          a *= g[i];
          c *= g[i + h2];
        }
        dst[i] = a * cs[i] - c * sn[i];
        dst[i + h2] = a * sn[i] + c * cs[i];
      }
    }
    for (int h = 0; h < Hkv; ++h) {
      float* dst = v + ((b * Hkv + h) * T + t) * hd;
      const float* src = row + int64_t(H + Hkv + h) * hd;
      if (!ve) {
        std::memcpy(dst, src, sizeof(float) * hd);
        continue;
      }
      const float* e = ve + (int64_t(tok[n]) * Hkv + h) * hd;
#pragma omp simd
      for (int d = 0; d < hd; ++d) dst[d] = src[d] + e[d];
    }
  }
}

template <typename OutT>
void qkv_heads_bwd(const float* dq, const float* dk, const float* dv, const float* qraw,
                   const float* kraw, const float* q_rstd, const float* k_rstd, const float* qg,
                   const float* kg, float* dqg, float* dkg, int B, int T, int H, int Hkv, int hd,
                   bool qk_norm, const float* cos_t, const float* sin_t, OutT* dqkv) {
  const int64_t ld = int64_t(H + 2 * Hkv) * hd;
  const int h2 = hd / 2;
  const int64_t N = int64_t(B) * T;
  const bool gains = qk_norm && qg && kg && dqg && dkg;
  const int nthreads = omp_get_max_threads();
  std::vector<float> partial(gains ? size_t(nthreads) * 2 * hd : 0, 0.0f);
#pragma omp parallel num_threads(nthreads)
  {
    int nt = omp_get_num_threads(), th = omp_get_thread_num();
    int64_t n0 = N * th / nt, n1 = N * (th + 1) / nt;  // fixed split: deterministic gain sums
    float* pq = gains ? partial.data() + size_t(th) * 2 * hd : nullptr;
    float* pk = gains ? pq + hd : nullptr;
    std::vector<float> gy(hd);
    for (int64_t n = n0; n < n1; ++n) {
      int64_t b = n / T, t = n % T;
      OutT* row = dqkv + n * ld;
      const float* cs = cos_t + t * h2;
      const float* sn = sin_t + t * h2;
      for (int j = 0; j < H + Hkv; ++j) {
        bool isq = j < H;
        int h = isq ? j : j - H;
        int nh = isq ? H : Hkv;
        int64_t hrow = (b * nh + h) * T + t;
        const float* gsrc = (isq ? dq : dk) + hrow * hd;
        // inverse rotation of the gradient
        for (int i = 0; i < h2; ++i) {
          float a = gsrc[i], c = gsrc[i + h2];
          gy[i] = a * cs[i] + c * sn[i];
          gy[i + h2] = -a * sn[i] + c * cs[i];
        }
        OutT* dst = row + int64_t(j) * hd;
        if (!qk_norm) {
          for (int d = 0; d < hd; ++d) put(dst + d, gy[d]);
          continue;
        }
        const float* x = (isq ? qraw : kraw) + hrow * hd;
        const float* g = isq ? qg : kg;
        float s = (isq ? q_rstd : k_rstd)[hrow];
        float kk = rms_bwd_dot(gy.data(), g, x, hd) * s * s * s / float(hd);
        for (int d = 0; d < hd; ++d) put(dst + d, s * (g ? g[d] : 1.0f) * gy[d] - kk * x[d]);
        if (gains) {
          float* pg = isq ? pq : pk;
          for (int d = 0; d < hd; ++d) pg[d] += gy[d] * x[d] * s;
        }
      }
      for (int h = 0; h < Hkv; ++h) {
        const float* src = dv + ((b * Hkv + h) * T + t) * hd;
        OutT* dst = row + int64_t(H + Hkv + h) * hd;
        for (int d = 0; d < hd; ++d) put(dst + d, src[d]);
      }
    }
  }
  if (gains)
    for (int th = 0; th < nthreads; ++th)
      for (int d = 0; d < hd; ++d) {
        dqg[d] += partial[size_t(th) * 2 * hd + d];
        dkg[d] += partial[size_t(th) * 2 * hd + hd + d];
      }
}

template void qkv_heads_bwd<float>(const float*, const float*, const float*, const float*,
                                   const float*, const float*, const float*, const float*,
                                   const float*, float*, float*, int, int, int, int, int, bool,
                                   const float*, const float*, float*);
template void qkv_heads_bwd<bf16>(const float*, const float*, const float*, const float*,
                                  const float*, const float*, const float*, const float*,
                                  const float*, float*, float*, int, int, int, int, int, bool,
                                  const float*, const float*, bf16*);

// --- activations ----------------------------------------------------------------------------------
template <typename OutT>
static void relu2_fwd_t(const float* x, OutT* y, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float r = keep_if(x[i], x[i] > 0);
    put(y + i, r * r);
  }
}

template <typename OutT>
static void relu2_bwd_t(const float* x, const float* dy, OutT* dx, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) put(dx + i, keep_if(2.0f * x[i] * dy[i], x[i] > 0));
}

static constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)

template <typename OutT>
static void gelu_fwd_t(const float* x, OutT* y, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float u = kGeluC * (v + 0.044715f * v * v * v);
    put(y + i, 0.5f * v * (1.0f + vtanh(u)));
  }
}

template <typename OutT>
static void gelu_bwd_t(const float* x, const float* dy, OutT* dx, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float u = kGeluC * (v + 0.044715f * v * v * v);
    float th = vtanh(u);
    float du = kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
    put(dx + i, dy[i] * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du));
  }
}

template <typename OutT>
static void swiglu_fwd_t(const float* hg, OutT* y, int64_t N, int64_t Hd) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* up = hg + n * 2 * Hd;
    const float* gate = up + Hd;
    OutT* yr = y + n * Hd;
#pragma omp simd
    for (int64_t i = 0; i < Hd; ++i) {
      float g = gate[i];
      float sg = 1.0f / (1.0f + vexp(-g));
      put(yr + i, up[i] * g * sg);
    }
  }
}

template <typename OutT>
static void swiglu_bwd_t(const float* hg, const float* dy, OutT* dhg, int64_t N, int64_t Hd) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* up = hg + n * 2 * Hd;
    const float* gate = up + Hd;
    const float* dyr = dy + n * Hd;
    OutT* dup = dhg + n * 2 * Hd;
    OutT* dgate = dup + Hd;
#pragma omp simd
    for (int64_t i = 0; i < Hd; ++i) {
      float g = gate[i];
      float sg = 1.0f / (1.0f + vexp(-g));
      put(dup + i, dyr[i] * g * sg);
      put(dgate + i, dyr[i] * up[i] * sg * (1.0f + g * (1.0f - sg)));
    }
  }
}

void relu2_fwd(const float* x, float* y, int64_t n) { relu2_fwd_t(x, y, n); }
void relu2_fwd(const float* x, bf16* y, int64_t n) { relu2_fwd_t(x, y, n); }
void relu2_bwd(const float* x, const float* dy, float* dx, int64_t n) { relu2_bwd_t(x, dy, dx, n); }
void relu2_bwd(const float* x, const float* dy, bf16* dx, int64_t n) { relu2_bwd_t(x, dy, dx, n); }
void gelu_fwd(const float* x, float* y, int64_t n) { gelu_fwd_t(x, y, n); }
void gelu_fwd(const float* x, bf16* y, int64_t n) { gelu_fwd_t(x, y, n); }
void gelu_bwd(const float* x, const float* dy, float* dx, int64_t n) { gelu_bwd_t(x, dy, dx, n); }
void gelu_bwd(const float* x, const float* dy, bf16* dx, int64_t n) { gelu_bwd_t(x, dy, dx, n); }
void swiglu_fwd(const float* hg, float* y, int64_t N, int64_t Hd) { swiglu_fwd_t(hg, y, N, Hd); }
void swiglu_fwd(const float* hg, bf16* y, int64_t N, int64_t Hd) { swiglu_fwd_t(hg, y, N, Hd); }
void swiglu_bwd(const float* hg, const float* dy, float* dhg, int64_t N, int64_t Hd) {
  swiglu_bwd_t(hg, dy, dhg, N, Hd);
}
void swiglu_bwd(const float* hg, const float* dy, bf16* dhg, int64_t N, int64_t Hd) {
  swiglu_bwd_t(hg, dy, dhg, N, Hd);
}

// --- residual -------------------------------------------------------------------------------------
void residual_fwd(const float* a, const float* b, float* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void residual_bwd(const float* dout, float* da, float* db, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

// --- two-term mix ---------------------------------------------------------------------------------
void mix2_fwd(const float* x, const float* x0, const float* w, float* out, int64_t n) {
  const float a = w[0], b = w[1];
#pragma omp parallel for simd schedule(static) if (n >= (1 << 16))
  for (int64_t i = 0; i < n; ++i) out[i] = a * x[i] + b * x0[i];
}

void mix2_bwd(const Mix2BwdArgs& args) {
  const float *dout = args.dout, *x = args.x, *x0 = args.x0, *w = args.w;
  float *dx = args.dx, *dx0 = args.dx0, *dw = args.dw;
  const int64_t n = args.n;
  constexpr int64_t kChunk = 16384;
  const float a = w[0], b = w[1];
  const int64_t nchunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(size_t(2 * nchunks), 0.0);
#pragma omp parallel for schedule(static) if (nchunks > 4)
  for (int64_t c = 0; c < nchunks; ++c) {
    double sx = 0, sx0 = 0;
    for (int64_t i = c * kChunk, hi = std::min(n, (c + 1) * kChunk); i < hi; ++i) {
      const float g = dout[i];
      sx += double(g) * x[i];
      sx0 += double(g) * x0[i];
      dx0[i] += b * g;
      dx[i] = a * g;
    }
    part[size_t(2 * c)] = sx;
    part[size_t(2 * c + 1)] = sx0;
  }
  double sx = 0, sx0 = 0;
  for (int64_t c = 0; c < nchunks; ++c) sx += part[size_t(2 * c)], sx0 += part[size_t(2 * c + 1)];
  dw[0] += float(sx);
  dw[1] += float(sx0);
}

// --- softcap + cross-entropy ------------------------------------------------------------------------
void softcap_fwd(float* z, int64_t n, float cap) {
  if (cap <= 0) return;
  float inv = 1.0f / cap;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) z[i] = cap * vtanh(z[i] * inv);
}

// s = cap tanh(u), u = z / cap, through q = 1 / (e^{2u} + 1): tanh(u) = 1 - 2q, so s - cap = -2 cap q
// comes without subtracting nearly equal values and lies in [-2 cap, 0] (its exp needs no clamping
// for cap <= 40), and 1 - tanh(u)^2 = 4 q (1 - q). 2u is clamped to +-18, where q is within 2e-8 of
// 0 or 1. Returns q.
inline float softcap_q(float z, float two_inv) {
  return 1.0f / (vexp_coarse(vclamp(z * two_inv, -18.0f, 18.0f)) + 1.0f);
}

// First index of the row's maximum.
static int row_argmax(const float* z, int V) {
  float best = -INFINITY;
#pragma omp simd reduction(max : best)
  for (int j = 0; j < V; ++j) best = std::max(best, z[j]);
  int am = 0;
  while (am < V - 1 && z[am] != best) ++am;
  return am;
}

// One pass over a capped row (cap <= 40), reading z only: returns sum_j e^{s_j - cap}, and with w
// non-null stores w_j = e^{s_j - cap} q_j (1 - q_j), the gradient up to a factor per row (w may be z).
static float softcap_expsum(const float* z, float* w, int V, float cap) {
  const float two_inv = 2.0f / cap, m2cap = -2.0f * cap;
  float sum = 0;
  if (!w) {
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; ++j) sum += vexp_coarse(m2cap * softcap_q(z[j], two_inv));
    return sum;
  }
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; ++j) {
    const float q = softcap_q(z[j], two_inv);
    const float p = vexp_coarse(m2cap * q);
    w[j] = p * (q * (1.0f - q));
    sum += p;
  }
  return sum;
}

// The row's gradient from the weights w (softcap_expsum): w_j scale in place, the one-hot term
// `corr` taken off at the target, zeros in the padding [V, Vp) of the destination; with gb also
// rounded to bf16 there (padding included), the same bits as f32_to_bf16 of the fp32 gradient.
template <bool kBf16>
static void scale_grad(float* w, bf16* gb, int V, int Vp, float scale, int32_t tg, float corr) {
#pragma omp simd
  for (int j = 0; j < V; ++j) {
    const float g = w[j] * scale;
    w[j] = g;
    if constexpr (kBf16) put(gb + j, g);
  }
  w[tg] -= corr;
  if constexpr (kBf16) {
    put(gb + tg, w[tg]);
    std::fill(gb + V, gb + Vp, bf16(0));
  } else {
    std::fill(w + V, w + Vp, 0.0f);
  }
}

// Rows uncapped, or capped above 40: s in place, then the log-sum-exp shifted by the row maximum.
// Returns the log-sum-exp.
static float plain_lse(float* z, int V, float cap) {
  if (cap > 0) {
    const float inv = 1.0f / cap;
#pragma omp simd
    for (int j = 0; j < V; ++j) z[j] = cap * vtanh(z[j] * inv);
  }
  float mx = -INFINITY, sum = 0;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < V; ++j) mx = std::max(mx, z[j]);
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; ++j) sum += vexp_nonpositive(z[j] - mx);
  return mx + std::log(sum);
}

// Gradient of grad_scale * loss over a row that holds s: softmax(s) (1 - (s/cap)^2) grad_scale,
// minus the one-hot term grad_scale (1 - (s_t/cap)^2) at the target.
static void plain_grad(float* z, int V, float cap, float lse, int32_t tg, float st, float gs) {
  const bool capped = cap > 0;
  const float inv = capped ? 1.0f / cap : 0.0f;
#pragma omp simd
  for (int j = 0; j < V; ++j) {
    const float s = z[j];
    const float ds = vexp_nonpositive(s - lse) * gs;  // lse >= s up to rounding
    z[j] = capped ? ds * (1.0f - (s * inv) * (s * inv)) : ds;
  }
  z[tg] -= gs * (capped ? (1.0f - (st * inv) * (st * inv)) : 1.0f);
}

// Where a row's gradient goes: nowhere (!want), in place into the logits, or with gb into that bf16
// row only, the fp32 weights then kept in `scratch` (V floats), so the logits are only read.
struct RowGrad {
  bool want;
  float gs;            // grad_scale
  bf16* gb;            // the row of grad_bf16, or null
  float* scratch;
};

// Loss of a row capped at cap <= 40 (0 for an ignored target), its gradient where gr says. The
// log-sum-exp is shifted by cap, a bound on every s, so one pass does the softcap and the exp-sum
// (terms of at least e^(-2 cap) stay normal floats).
static float capped_row(float* z, int V, int Vp, float cap, int32_t tg, const RowGrad& gr) {
  const float qt = tg >= 0 ? softcap_q(z[tg], 2.0f / cap) : 0.0f;  // before z is overwritten
  if (!gr.want) return tg >= 0 ? std::log(softcap_expsum(z, nullptr, V, cap)) + 2.0f * cap * qt : 0.0f;
  float* w = gr.gb ? gr.scratch : z;
  const float sum = softcap_expsum(z, w, V, cap);
  // softmax_j (1 - tanh_j^2) = e^{s_j - cap} / sum * 4 q_j (1 - q_j)
  const float scale = 4.0f * gr.gs / sum, corr = 4.0f * gr.gs * (qt * (1.0f - qt));
  if (gr.gb)
    scale_grad<true>(w, gr.gb, V, Vp, scale, tg, corr);
  else
    scale_grad<false>(w, nullptr, V, Vp, scale, tg, corr);
  return std::log(sum) + 2.0f * cap * qt;  // lse - s_t with lse = cap + log(sum), s_t = cap - 2 cap q_t
}

// Loss of row z (0 for an ignored target); the gradient where gr says (z's contents are left
// unspecified when it goes to gr.gb).
static float xent_row(float* z, int V, int Vp, float cap, int32_t tg, const RowGrad& gr) {
  if (gr.want && tg < 0) {
    if (gr.gb)
      std::fill(gr.gb, gr.gb + Vp, bf16(0));
    else
      std::memset(z, 0, sizeof(float) * Vp);
    return 0.0f;
  }
  if (cap > 0 && cap <= 40.0f) return capped_row(z, V, Vp, cap, tg, gr);
  const float lse = plain_lse(z, V, cap);
  const float st = tg >= 0 ? z[tg] : 0.0f;
  if (gr.want) {
    plain_grad(z, V, cap, lse, tg, st, gr.gs);
    std::fill(z + V, z + Vp, 0.0f);
    if (gr.gb) {
#pragma omp simd
      for (int j = 0; j < Vp; ++j) put(gr.gb + j, z[j]);
    }
  }
  return tg >= 0 ? lse - st : 0.0f;
}

double softcap_xent(float* logits, const int32_t* targets, int64_t N, int V, int Vp, int64_t ld, float cap,
                    float* loss, int32_t* argmax, bool want_grad, float grad_scale, bf16* grad_bf16) {
  std::vector<float> own_loss(loss ? 0 : N);
  float* L = loss ? loss : own_loss.data();
  const bool to_bf16 = want_grad && grad_bf16;
#pragma omp parallel
  {
    std::vector<float> scratch(to_bf16 ? V : 0);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      float* z = logits + n * ld;
      // The softcap is increasing, so the argmax of the raw logits is that of s.
      if (argmax) argmax[n] = row_argmax(z, V);
      const RowGrad gr{want_grad, grad_scale, to_bf16 ? grad_bf16 + n * ld : nullptr, scratch.data()};
      L[n] = xent_row(z, V, Vp, cap, targets ? targets[n] : -1, gr);
    }
  }
  double total = 0;
  for (int64_t n = 0; n < N; ++n)
    if (!targets || targets[n] >= 0) total += L[n];
  return total;
}

CLM_ISA_END

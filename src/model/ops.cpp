// Elementwise and row-wise layers of the GPT (embedding, RMSNorm, linear wrappers, RoPE, MLP
// activations, residual add, softcapped cross-entropy). Attention lives in attention.cpp.
// All loops are OpenMP-static or have no cross-iteration reductions, so results depend only on the
// thread count. Reductions over rows (norm gains) use per-thread partials summed in thread order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <omp.h>

#include "model/ops.h"
#include "model/vmath.h"

namespace clm {

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

// --- RMSNorm ----------------------------------------------------------------------------------------
void rmsnorm_fwd(const float* x, const float* g, float* y, float* rstd, int64_t rows, int64_t C,
                 float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * C;
    float* yr = y + r * C;
    float ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += xr[c] * xr[c];
    float s = 1.0f / std::sqrt(ss / float(C) + eps);
    if (rstd) rstd[r] = s;
    if (g)
      for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * s * g[c];
    else
      for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * s;
  }
}

void rmsnorm_bwd(const float* x, const float* g, const float* rstd, const float* dy, float* dx,
                 float* dg, int64_t rows, int64_t C) {
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
      float dot = 0;
      if (g) {
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < C; ++c) dot += dyr[c] * g[c] * xr[c];
      } else {
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < C; ++c) dot += dyr[c] * xr[c];
      }
      float k = dot * s * s * s / float(C);
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

// --- linear -----------------------------------------------------------------------------------------
void linear_fwd(MatPrec prec, const void* x, const void* W, float* y, int64_t N, int64_t in,
                int64_t out) {
  gemm(prec, false, true, N, out, in, x, W, y, false);
}

void linear_bwd_input(MatPrec prec, const void* dy, const void* W, float* dx, int64_t N,
                      int64_t in, int64_t out, bool accumulate) {
  gemm(prec, false, false, N, in, out, dy, W, dx, accumulate);
}

void linear_bwd_weight(MatPrec prec, const void* dy, const void* x, float* dW, int64_t N,
                       int64_t in, int64_t out) {
  gemm(prec, true, false, out, in, N, dy, x, dW, true);
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
void split_heads(const float* x, int64_t ld, float* y, int B, int T, int nh, int hd) {
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

// --- activations ----------------------------------------------------------------------------------
void relu2_fwd(const float* x, float* y, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float r = x[i] > 0 ? x[i] : 0.0f;
    y[i] = r * r;
  }
}

void relu2_bwd(const float* x, const float* dy, float* dx, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > 0 ? 2.0f * x[i] * dy[i] : 0.0f;
}

static constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)

void gelu_fwd(const float* x, float* y, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float u = kGeluC * (v + 0.044715f * v * v * v);
    y[i] = 0.5f * v * (1.0f + vtanh(u));
  }
}

void gelu_bwd(const float* x, const float* dy, float* dx, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float u = kGeluC * (v + 0.044715f * v * v * v);
    float th = vtanh(u);
    float du = kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du);
  }
}

void swiglu_fwd(const float* hg, float* y, int64_t N, int64_t Hd) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* up = hg + n * 2 * Hd;
    const float* gate = up + Hd;
    float* yr = y + n * Hd;
    for (int64_t i = 0; i < Hd; ++i) {
      float g = gate[i];
      float sg = 1.0f / (1.0f + vexp(-g));
      yr[i] = up[i] * g * sg;
    }
  }
}

void swiglu_bwd(const float* hg, const float* dy, float* dhg, int64_t N, int64_t Hd) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* up = hg + n * 2 * Hd;
    const float* gate = up + Hd;
    const float* dyr = dy + n * Hd;
    float* dup = dhg + n * 2 * Hd;
    float* dgate = dup + Hd;
    for (int64_t i = 0; i < Hd; ++i) {
      float g = gate[i];
      float sg = 1.0f / (1.0f + vexp(-g));
      dup[i] = dyr[i] * g * sg;
      dgate[i] = dyr[i] * up[i] * sg * (1.0f + g * (1.0f - sg));
    }
  }
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

// --- softcap + cross-entropy ------------------------------------------------------------------------
void softcap_fwd(float* z, int64_t n, float cap) {
  if (cap <= 0) return;
  float inv = 1.0f / cap;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) z[i] = cap * vtanh(z[i] * inv);
}

double softcap_xent(float* logits, const int32_t* targets, int64_t N, int V, int Vp, float cap,
                    float* loss, int32_t* argmax, bool want_grad, float grad_scale) {
  std::vector<float> own_loss(loss ? 0 : N);
  float* L = loss ? loss : own_loss.data();
  const bool capped = cap > 0;
  const float inv = capped ? 1.0f / cap : 0.0f;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* z = logits + n * Vp;
    if (capped) {
#pragma omp simd
      for (int j = 0; j < V; ++j) z[j] = cap * vtanh(z[j] * inv);  // z now holds s
    }
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V; ++j) mx = std::max(mx, z[j]);
    if (argmax) {
      int am = 0;
      while (am < V - 1 && z[am] != mx) ++am;  // first index of the maximum
      argmax[n] = am;
    }
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; ++j) sum += vexp(z[j] - mx);
    float lse = mx + std::log(sum);
    int32_t tg = targets ? targets[n] : -1;
    L[n] = tg >= 0 ? lse - z[tg] : 0.0f;
    if (!want_grad) continue;
    if (tg < 0) {
      std::memset(z, 0, sizeof(float) * Vp);
      continue;
    }
#pragma omp simd
    for (int j = 0; j < V; ++j) {
      float s = z[j];
      float ds = vexp(s - lse) * grad_scale;
      z[j] = capped ? ds * (1.0f - (s * inv) * (s * inv)) : ds;
    }
    for (int j = V; j < Vp; ++j) z[j] = 0.0f;
    // The one-hot term d(-s_t)/dz_t = -(1 - (s_t/cap)^2). s_t was overwritten above; it equals
    // lse - loss.
    float st = lse - L[n];
    z[tg] -= grad_scale * (capped ? (1.0f - (st * inv) * (st * inv)) : 1.0f);
  }
  double total = 0;
  for (int64_t n = 0; n < N; ++n)
    if (!targets || targets[n] >= 0) total += L[n];
  return total;
}

}  // namespace clm

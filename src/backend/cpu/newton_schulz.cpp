// Newton-Schulz orthogonalisation (see newton_schulz.h). Per iteration on X (a x b, a <= b):
//   A  = X X^T                       2 a^2 b FLOPs
//   A <- c A A + b A                 2 a^3        (oneDNN output scale c, sum post-op b, in place)
//   X <- A X + a X                   2 a^2 b      (sum post-op a)
// so working on the short side keeps the a^3 term small. In bf16 mode the matmul inputs are bf16
// copies of the fp32 state (fp32 accumulation; the iteration's state stays fp32), which is what
// makes Muon affordable on this CPU: bf16 matmuls run ~2x faster than fp32 through AVX512_BF16.
// The matmuls run on the backend's shared oneDNN engine and stream (dnnl_context.h); the bf16
// copies come from the dispatched f32_to_bf16 (the conversion instruction where the CPU has one).
#include "backend/cpu/newton_schulz.h"

#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

#include <dnnl.hpp>

#include "backend/cpu/dnnl_context.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/optim_kernels.h"
#include "core/common.h"

namespace clm {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct NewtonSchulzImpl {
  // Primitives keyed by (M, K, N, weights transposed, output scale, sum scale, bf16).
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, float, float, bool>;
  std::map<Key, dnnl::matmul> cache;
  std::vector<float> X, Y, A, B;       // fp32 state and scratch
  std::vector<bf16> Xh, Ah;            // bf16 copies

  dnnl::matmul& get(int64_t M, int64_t K, int64_t N, bool transB, float alpha, float beta, bool bf16) {
    Key key{M, K, N, transB, alpha, beta, bf16};
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    dt in = bf16 ? dt::bf16 : dt::f32;
    dnnl::memory::desc a_md({M, K}, in, dnnl::memory::dims{K, 1});
    // Weights K x N: stored row-major (K x N) or, when transposed, as the rows of an N x K matrix.
    dnnl::memory::desc b_md({K, N}, in, transB ? dnnl::memory::dims{1, K} : dnnl::memory::dims{N, 1});
    dnnl::memory::desc c_md({M, N}, dt::f32, dnnl::memory::dims{N, 1});
    dnnl::primitive_attr attr;
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops po;
      po.append_sum(beta);
      attr.set_post_ops(po);
    }
    dnnl::matmul::desc d(a_md, b_md, c_md);
    dnnl::matmul::primitive_desc pd(d, attr, cpu_engine());
    return cache.emplace(key, dnnl::matmul(pd)).first->second;
  }

  // C (M x N, fp32) = alpha * A(M x K) * B(K x N or its transpose stored N x K) + beta * C
  void matmul(const void* a, const void* b, float* c, int64_t M, int64_t K, int64_t N, bool transB, float alpha,
              float beta, bool bf16) {
    auto& prim = get(M, K, N, transB, alpha, beta, bf16);
    dt in = bf16 ? dt::bf16 : dt::f32;
    dnnl::engine& eng = cpu_engine();
    dnnl::memory am({{M, K}, in, dnnl::memory::dims{K, 1}}, eng, const_cast<void*>(a));
    dnnl::memory bm({{K, N}, in, transB ? dnnl::memory::dims{1, K} : dnnl::memory::dims{N, 1}}, eng,
                    const_cast<void*>(b));
    dnnl::memory cm({{M, N}, dt::f32, dnnl::memory::dims{N, 1}}, eng, c);
    prim.execute(cpu_stream(), {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    cpu_stream().wait();
  }
};

// Below this many multiply-adds per X X^T (a*a*b), the fp32 loop path is used (always in fp32).
constexpr int64_t kSmallNs = 128 * 128 * 256;

// Small matrices (tiny test models, a d_model of 64..128): a plain fp32 triple loop beats oneDNN's
// per-call overhead. C (M x N) = alpha * A(M x K) * B(K x N, or the rows of an N x K matrix) + beta*C.
static void small_matmul(const float* A, const float* Bm, float* C, int64_t M, int64_t K, int64_t N, bool transB,
                         float alpha, float beta) {
  std::vector<float> row(static_cast<size_t>(N));
  for (int64_t i = 0; i < M; ++i) {
    std::fill(row.begin(), row.end(), 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float a = A[i * K + k];
      if (transB) {
        for (int64_t j = 0; j < N; ++j) row[j] += a * Bm[j * K + k];
      } else {
        const float* b = Bm + k * N;
        for (int64_t j = 0; j < N; ++j) row[j] += a * b[j];
      }
    }
    for (int64_t j = 0; j < N; ++j) C[i * N + j] = alpha * row[j] + (beta != 0.0f ? beta * C[i * N + j] : 0.0f);
  }
}

static void small_newton_schulz(std::vector<float>& X, std::vector<float>& Y, std::vector<float>& A,
                                std::vector<float>& B, int64_t a, int64_t b, const NsSchedule& sched) {
  Y.resize(X.size());
  B.resize(A.size());
  for (const NsStep& k : sched.steps) {
    small_matmul(X.data(), X.data(), A.data(), a, b, a, true, 1.0f, 0.0f);
    std::copy(A.begin(), A.end(), B.begin());
    small_matmul(A.data(), A.data(), B.data(), a, a, a, false, k.c, k.b);
    std::copy(X.begin(), X.end(), Y.begin());
    small_matmul(B.data(), X.data(), Y.data(), a, a, b, false, 1.0f, k.a);
    std::swap(X, Y);
  }
}

NewtonSchulz::NewtonSchulz() : impl(std::make_unique<NewtonSchulzImpl>()) {}
NewtonSchulz::~NewtonSchulz() = default;
NewtonSchulz::NewtonSchulz(NewtonSchulz&&) noexcept = default;
NewtonSchulz& NewtonSchulz::operator=(NewtonSchulz&&) noexcept = default;

double NewtonSchulz::flops(int64_t rows, int64_t cols, int steps) {
  double a = double(std::min(rows, cols)), b = double(std::max(rows, cols));
  return steps * (4.0 * a * a * b + 2.0 * a * a * a);
}

void NewtonSchulz::run(const float* G, float* out, int64_t rows, int64_t cols, const NsSchedule& sched,
                       bool bf16) {
  NewtonSchulzImpl& s = *impl;
  // Without bf16 matmuls in oneDNN (CPUs without AVX-512) the iteration runs in fp32: widening bf16
  // copies back to fp32 would cost the same and only lose precision.
  bf16 = bf16 && cpu_has_bf16_matmul();
  const bool tr = rows > cols;  // work on X = G^T so that X is short and wide
  const int64_t a = tr ? cols : rows, b = tr ? rows : cols, n = a * b;
  s.X.resize(n);
  s.A.resize(a * a);
  // Normalise by the Frobenius norm (times the schedule's margin) so every singular value starts in
  // (0, 1].
  double ss = sum_squares(G, n);
  const float inv = float(1.0 / (std::sqrt(ss) * sched.norm_margin + 1e-7));
  if (tr) {
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < b; ++j) s.X[i * b + j] = G[j * cols + i] * inv;
  } else {
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; ++i) s.X[i] = G[i] * inv;
  }
  if (a * a * b <= kSmallNs) {
    small_newton_schulz(s.X, s.Y, s.A, s.B, a, b, sched);
  } else if (bf16) {
    s.Xh.resize(n);
    s.Ah.resize(a * a);
    for (const NsStep& k : sched.steps) {
      f32_to_bf16(s.X.data(), s.Xh.data(), n);
      s.matmul(s.Xh.data(), s.Xh.data(), s.A.data(), a, b, a, true, 1.0f, 0.0f, true);        // A = X X^T
      f32_to_bf16(s.A.data(), s.Ah.data(), a * a);
      s.matmul(s.Ah.data(), s.Ah.data(), s.A.data(), a, a, a, false, k.c, k.b, true);        // A = cAA + bA
      f32_to_bf16(s.A.data(), s.Ah.data(), a * a);
      s.matmul(s.Ah.data(), s.Xh.data(), s.X.data(), a, a, b, false, 1.0f, k.a, true);       // X = AX + aX
    }
  } else {
    s.Y.resize(n);
    s.B.resize(a * a);
    for (const NsStep& k : sched.steps) {
      s.matmul(s.X.data(), s.X.data(), s.A.data(), a, b, a, true, 1.0f, 0.0f, false);
      std::memcpy(s.B.data(), s.A.data(), sizeof(float) * a * a);
      s.matmul(s.A.data(), s.A.data(), s.B.data(), a, a, a, false, k.c, k.b, false);
      std::memcpy(s.Y.data(), s.X.data(), sizeof(float) * n);
      s.matmul(s.B.data(), s.X.data(), s.Y.data(), a, a, b, false, 1.0f, k.a, false);
      std::swap(s.X, s.Y);
    }
  }
  if (tr) {
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t j = 0; j < b; ++j)
      for (int64_t i = 0; i < a; ++i) out[j * cols + i] = s.X[i * b + j];
  } else {
    std::memcpy(out, s.X.data(), sizeof(float) * n);
  }
}

}  // namespace clm

// Newton-Schulz orthogonalisation (see newton_schulz.h). Per iteration on X (a x b, a <= b):
//   A  = X X^T                       2 a^2 b FLOPs
//   A <- c A A + b A                 2 a^3        (oneDNN output scale c, sum post-op b, in place)
//   X <- A X + a X                   2 a^2 b      (sum post-op a)
// so working on the short side keeps the a^3 term small. In bf16 mode the matmul inputs are bf16
// copies of the fp32 state (fp32 accumulation; the iteration's state stays fp32), which is what
// makes Muon affordable on this CPU: bf16 matmuls run ~2x faster than fp32 through AVX512_BF16.
// The matmuls run on the backend's shared oneDNN engine and stream (dnnl_context.h); the bf16
// copies come from the dispatched f32_to_bf16 (the conversion instruction where the CPU has one).
//
// Many matrices at once (run_many): a small model's matrices (192 x 768 and the like) give each
// matmul too little work to split over threads: the fork/join and thin per-thread tiles cost more
// than they save. So the small ones are dealt whole to the OpenMP threads, largest first onto the
// least loaded thread, and each thread runs its matrices' iterations single-threaded with its own
// scratch, primitives (built for one thread) and oneDNN stream; a matrix large enough that its own
// matmuls split well runs alone on every thread, as run() does.
#include "backend/cpu/newton_schulz.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <numeric>
#include <tuple>
#include <vector>

#include <dnnl.hpp>
#include <omp.h>

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
  // The stream its primitives run on: the backend's shared one, or (a worker of run_many, whose
  // threads run primitives at the same time) its own.
  std::unique_ptr<dnnl::stream> own_stream;
  dnnl::stream& stream() { return own_stream ? *own_stream : cpu_stream(); }

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
    prim.execute(stream(), {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream().wait();
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

// A worker of run_many: one per OpenMP thread, each with its own scratch, primitive cache and stream.
struct NewtonSchulzWorkers {
  std::vector<std::unique_ptr<NewtonSchulzImpl>> w;
  NewtonSchulzImpl& at(size_t i) {
    while (w.size() <= i) {
      w.push_back(std::make_unique<NewtonSchulzImpl>());
      w.back()->own_stream = std::make_unique<dnnl::stream>(cpu_engine());
    }
    return *w[i];
  }
};

NewtonSchulz::NewtonSchulz()
    : impl(std::make_unique<NewtonSchulzImpl>()), workers(std::make_unique<NewtonSchulzWorkers>()) {}
NewtonSchulz::~NewtonSchulz() = default;
NewtonSchulz::NewtonSchulz(NewtonSchulz&&) noexcept = default;
NewtonSchulz& NewtonSchulz::operator=(NewtonSchulz&&) noexcept = default;

double NewtonSchulz::flops(int64_t rows, int64_t cols, int steps) {
  double a = double(std::min(rows, cols)), b = double(std::max(rows, cols));
  return steps * (4.0 * a * a * b + 2.0 * a * a * a);
}

void NewtonSchulz::run(const float* G, float* out, int64_t rows, int64_t cols, const NsSchedule& sched,
                       bool bf16) {
  run_on(*impl, G, out, rows, cols, sched, bf16);
}

void NewtonSchulz::run_on(NewtonSchulzImpl& s, const float* G, float* out, int64_t rows, int64_t cols,
                          const NsSchedule& sched, bool bf16) {
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

bool NewtonSchulz::threaded(int64_t rows, int64_t cols) const {
  const int64_t a = std::min(rows, cols), b = std::max(rows, cols);
  return a * a * b >= threaded_from;
}

std::vector<std::vector<int>> NewtonSchulz::deal(const std::vector<double>& cost, int nthr) {
  std::vector<int> order(cost.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return cost[size_t(x)] > cost[size_t(y)]; });
  std::vector<std::vector<int>> out(size_t(std::max(nthr, 1)));
  std::vector<double> load(out.size(), 0.0);
  for (int i : order) {
    const size_t t = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    out[t].push_back(i);
    load[t] += cost[size_t(i)];
  }
  return out;
}

void NewtonSchulz::run_many(const float* const* G, float* const* out, const int64_t* rows, const int64_t* cols,
                            int count, const NsSchedule& sched, bool bf16) {
  const int nthr = omp_in_parallel() ? 1 : omp_get_max_threads();
  std::vector<int> small;
  for (int i = 0; i < count; ++i) {
    if (nthr > 1 && !threaded(rows[i], cols[i])) small.push_back(i);
    else run(G[i], out[i], rows[i], cols[i], sched, bf16);  // its matmuls use every thread
  }
  if (small.size() < 2) {  // nothing to run beside it
    for (int i : small) run(G[i], out[i], rows[i], cols[i], sched, bf16);
    return;
  }
  std::vector<double> cost;
  for (int i : small) cost.push_back(flops(rows[i], cols[i], int(sched.steps.size())));
  const int team = std::min<int>(nthr, int(small.size()));
  const std::vector<std::vector<int>> share = deal(cost, team);
  for (int t = 0; t < team; ++t) workers->at(size_t(t));  // created outside the parallel region
  std::vector<std::exception_ptr> err(static_cast<size_t>(team));
#pragma omp parallel num_threads(team)
  {
    // One thread for everything this thread calls: the kernels' own parallel loops, and oneDNN,
    // which builds and runs this worker's primitives for omp_get_max_threads() threads.
    omp_set_num_threads(1);
    // Share t goes to thread t; a smaller team than asked for (the runtime may give one) takes
    // the rest in turn, with the same results.
    for (int t = omp_get_thread_num(); t < team; t += omp_get_num_threads()) {
      try {
        NewtonSchulzImpl& w = *workers->w[size_t(t)];
        for (int j : share[size_t(t)]) {
          const int i = small[size_t(j)];
          run_on(w, G[i], out[i], rows[i], cols[i], sched, bf16);
        }
      } catch (...) {
        err[size_t(t)] = std::current_exception();
      }
    }
  }
  for (const std::exception_ptr& e : err)
    if (e) std::rethrow_exception(e);
}

}  // namespace clm

// oneDNN-backed gemm with a per-shape primitive cache, the CPU backend's oneDNN engine and stream
// (dnnl_context.h), and the scalar bf16 conversion (the array conversions are kernels, in
// convert.cpp).
// Why a cache: creating a oneDNN matmul primitive costs ~0.1-1 ms (JIT code generation); a training
// step calls a few dozen distinct shapes thousands of times, so each shape is created once.
#include "backend/cpu/matmul.h"

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <dnnl.hpp>
#include <omp.h>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/dnnl_context.h"
#include "core/common.h"

namespace clm {

namespace {

struct GemmKey {
  int prec, ta, tb, acc, threads;
  int64_t M, N, K;
  auto tie() const { return std::tie(prec, ta, tb, acc, threads, M, N, K); }
  bool operator<(const GemmKey& o) const { return tie() < o.tie(); }
};

struct GemmEntry {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
};

struct GemmCache {
  std::map<GemmKey, GemmEntry> map;
  std::vector<float> wide_a, wide_b;  // bf16 inputs widened to fp32 (no bf16 matmul on this CPU)
  std::mutex mu;
};

GemmCache& gemm_cache() {
  static GemmCache c;
  return c;
}

}  // namespace

// Created on first use and never destroyed: primitives cached in other static objects refer to the
// engine, and static destructors run in no order this file controls.
dnnl::engine& cpu_engine() {
  static dnnl::engine* eng = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *eng;
}

dnnl::stream& cpu_stream() {
  static dnnl::stream* strm = new dnnl::stream(cpu_engine());
  return *strm;
}

bool cpu_has_bf16_matmul() {
  static const bool ok = [] {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    try {
      dnnl::memory::desc ab({16, 16}, dt::bf16, tag::ab), c({16, 16}, dt::f32, tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ab, ab, c), cpu_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

namespace {
// oneDNN's fp32 gemm on CPUs without AVX-512 computes C = A^T B at about half its usual rate when C
// is tall and narrow, as the LM head's weight gradient is (M = vocabulary rows of N = d_model): 75
// against 145 GFLOP/s at 8192 x 192 x 4096 on 2 threads of an AVX2 AMD EPYC (bench/RESULTS.md),
// from M = 2048 up and N <= 256. The product C^T = B^T A has the fast shape, and adding its
// transpose into C is one pass over M N floats.
bool transposed_product_pays(MatPrec prec, bool trans_a, bool trans_b, int64_t M, int64_t N) {
  const bool fp32_math = prec == MatPrec::F32 || !cpu_has_bf16_matmul();
  return fp32_math && trans_a && !trans_b && M >= 2048 && N <= 256 && !cpu_features().avx512f;
}

// C[M,N] (=, or += when accumulate) the transpose of t[N,M].
void put_transposed(const float* t, float* C, int64_t M, int64_t N, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) C[m * N + n] = (accumulate ? C[m * N + n] : 0.0f) + t[n * M + m];
}
}  // namespace

void gemm(MatPrec prec, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const void* A,
          const void* B, float* C, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate) std::memset(C, 0, sizeof(float) * M * N);
    return;
  }
  if (transposed_product_pays(prec, trans_a, trans_b, M, N)) {  // C^T[N,M] = B^T A: B stored [K,N], A [K,M]
    thread_local std::vector<float> t;
    t.resize(size_t(M * N));
    gemm(prec, true, false, N, M, K, B, A, t.data(), false);
    put_transposed(t.data(), C, M, N, accumulate);
    return;
  }
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  auto& c = gemm_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  dnnl::engine& eng = cpu_engine();
  // Where oneDNN has no bf16 matmul for this CPU, bf16 inputs are widened to fp32 (exactly) and
  // multiplied in fp32: the same products, fp32 accumulation as before, only slower.
  const bool widen = prec == MatPrec::BF16 && !cpu_has_bf16_matmul();
  GemmKey key{int(prec), trans_a, trans_b, accumulate, omp_get_max_threads(), M, N, K};
  auto it = c.map.find(key);
  if (it == c.map.end()) {
    dt in_t = prec == MatPrec::BF16 && !widen ? dt::bf16 : dt::f32;
    dnnl::memory::desc a_md(dims{M, K}, in_t, trans_a ? dims{1, M} : dims{K, 1});
    dnnl::memory::desc b_md(dims{K, N}, in_t, trans_b ? dims{1, K} : dims{N, 1});
    dnnl::memory::desc c_md(dims{M, N}, dt::f32, dims{N, 1});
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    dnnl::matmul::desc d(a_md, b_md, c_md);
    dnnl::matmul::primitive_desc pd(d, attr, eng);
    it = c.map.emplace(key, GemmEntry{dnnl::matmul(pd), a_md, b_md, c_md}).first;
  }
  GemmEntry& e = it->second;
  if (widen) {
    c.wide_a.resize(size_t(M * K));
    c.wide_b.resize(size_t(K * N));
    bf16_to_f32(static_cast<const bf16*>(A), c.wide_a.data(), M * K);
    bf16_to_f32(static_cast<const bf16*>(B), c.wide_b.data(), K * N);
    A = c.wide_a.data();
    B = c.wide_b.data();
  }
  dnnl::memory am(e.a, eng, const_cast<void*>(A));
  dnnl::memory bm(e.b, eng, const_cast<void*>(B));
  dnnl::memory cm(e.c, eng, C);
  e.prim.execute(cpu_stream(), {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  cpu_stream().wait();
}

Bf16Timing time_bf16_vs_fp32(int64_t M, int64_t N, int64_t K, int reps) {
  std::vector<float> a32(size_t(M * K)), b32(size_t(N * K)), c(size_t(M * N));
  Rng rng(11);
  for (auto& v : a32) v = rng.normal();
  for (auto& v : b32) v = rng.normal();
  std::vector<bf16> a16(a32.size()), b16(b32.size());
  f32_to_bf16(a32.data(), a16.data(), int64_t(a32.size()));
  f32_to_bf16(b32.data(), b16.data(), int64_t(b32.size()));
  auto run = [&](MatPrec p) {
    const double t0 = now_seconds();
    if (p == MatPrec::BF16) gemm(p, false, true, M, N, K, a16.data(), b16.data(), c.data(), false);
    else gemm(p, false, true, M, N, K, a32.data(), b32.data(), c.data(), false);
    return now_seconds() - t0;
  };
  run(MatPrec::BF16);  // primitive creation (JIT) and first touch, untimed
  run(MatPrec::F32);
  Bf16Timing t{1e30, 1e30};
  for (int r = 0; r < reps; ++r) {  // alternating, so a burst of load hits both alike
    t.bf16_seconds = std::min(t.bf16_seconds, run(MatPrec::BF16));
    t.fp32_seconds = std::min(t.fp32_seconds, run(MatPrec::F32));
  }
  return t;
}

double measure_matmul_ceiling_gflops(int64_t n, int reps) {
  std::vector<bf16> a(n * n), b(n * n);
  std::vector<float> cbuf(n * n);
  Rng rng(7);
  for (auto& v : a) v = f32_to_bf16(rng.normal());
  for (auto& v : b) v = f32_to_bf16(rng.normal());
  gemm(MatPrec::BF16, false, true, n, n, n, a.data(), b.data(), cbuf.data(), false);  // warm-up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    double t0 = now_seconds();
    gemm(MatPrec::BF16, false, true, n, n, n, a.data(), b.data(), cbuf.data(), false);
    best = std::min(best, now_seconds() - t0);
  }
  return 2.0 * double(n) * n * n / best / 1e9;
}

}  // namespace clm

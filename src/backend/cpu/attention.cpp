// Causal grouped-query attention, tiled with an online softmax (FlashAttention-style) on the CPU.
// Forward: keys are transposed into tiles once per call; then each (batch, head, query tile) task
// streams key/value tiles, keeping a running max and sum per query row, so only a QT x KT score
// tile exists at a time. It saves the log-sum-exp per row. Backward recomputes each probability
// tile from q, k and that log-sum-exp; it runs one task per (batch, kv head), looping serially over
// the query heads of the group, so every gradient element is summed by one thread in a fixed order
// (deterministic, no atomics).
//
// Every tile product is one shape: out[m][0:W] (+)= sum_k a(m,k) * Brow_k[0:W], with W the key tile
// (64) or head_dim. bcast_fma() does it with register blocking (several rows share each loaded B
// vector) when W is a multiple of 16, and with plain loops otherwise. The blocked form is written
// with GCC vector types as wide as the kernel variant's registers (kernel_isa.h: 16 floats for
// AVX-512, 8 for AVX2, 4 for SSE2 or NEON), so each variant gets its own register plan from one
// source; with FMA available the multiply-add contracts into one instruction.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include <omp.h>

#include "backend/cpu/kernel_isa.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/vmath.h"

#if CLM_ISA == CLM_ISA_AVX512
#include <immintrin.h>
#endif

CLM_ISA_BEGIN

namespace {

constexpr int QT = 64;  // query rows per tile
constexpr int KT = 64;  // keys per tile (the vectorised dimension of the score tile)

constexpr int VL = CLM_ISA_VLEN;  // floats per SIMD register
typedef float vfloat __attribute__((vector_size(VL * sizeof(float))));
typedef float vfloat_unaligned
    __attribute__((vector_size(VL * sizeof(float)), aligned(4), may_alias));

inline vfloat vload(const float* p) { return *reinterpret_cast<const vfloat_unaligned*>(p); }
inline void vstore(float* p, vfloat v) { *reinterpret_cast<vfloat_unaligned*>(p) = v; }

// Keeps v in a register. Left alone, GCC folds the load of each B vector into each of the rows'
// FMAs that use it, so every FMA carries its own load and the loop is bound by loads, not FMAs
// (measured with AVX-512: ~2x slower attention).
inline void keep_in_register(vfloat& v) {
#if defined(__x86_64__)
  __asm__("" : "+v"(v));
#elif defined(__aarch64__)
  __asm__("" : "+w"(v));
#endif
}

// R rows x NB vectors of output:
//   out[i*ldo + 0:NB*VL] (+)= sum_k A[i*a_sm + k*a_sk] * B[k*ldb + 0:NB*VL].
// Always inlined: as a call of its own, GCC kept the accumulators in memory between the loops.
template <int R, int NB>
[[gnu::always_inline]] inline void bcast_fma_tile(float* __restrict out, int ldo,
                                                  const float* __restrict A, int a_sm, int a_sk,
                                                  const float* __restrict B, int ldb, int K,
                                                  bool zero) {
  vfloat acc[R][NB];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NB; ++v) acc[i][v] = zero ? vfloat{} : vload(out + i * ldo + v * VL);
  for (int k = 0; k < K; ++k) {
    vfloat b[NB];
    for (int v = 0; v < NB; ++v) {
      b[v] = vload(B + k * ldb + v * VL);
      keep_in_register(b[v]);
    }
    for (int i = 0; i < R; ++i) {
      const float a = A[i * a_sm + k * a_sk];
      for (int v = 0; v < NB; ++v) acc[i][v] += a * b[v];
    }
  }
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NB; ++v) vstore(out + i * ldo + v * VL, acc[i][v]);
}

// out[m*ldo + 0:W] = (zero ? 0 : out) + sum_{k<K} A[m*a_sm + k*a_sk] * B[k*ldb + 0:W], m < M.
// Column blocks of NB vectors, MR rows at a time: the MR*NB accumulators, NB B vectors and the
// broadcast A value fit the variant's registers (16 or 32). The rows left over go in tiles of 4
// and 2 before single rows: a one-row tile's NB accumulators are too few to hide the FMA latency
// (with AVX2, 64 rows are ten tiles of 6 and four rows, which as single rows cost a fifth of the
// tile products' time).
template <int W>
void bcast_fma_fixed(float* out, int ldo, const float* A, int a_sm, int a_sk, const float* B,
                     int ldb, int M, int K, bool zero) {
  static_assert(W % VL == 0);
  constexpr int NV = W / VL;
  constexpr int NB = std::min(NV, CLM_ISA_NREGS >= 32 ? 8 : 2);
  constexpr int MR = NB <= 2 ? 6 : (NB <= 4 ? 4 : 2);
  for (int j0 = 0; j0 < W; j0 += NB * VL) {
    int m = 0;
    for (; m + MR <= M; m += MR)
      bcast_fma_tile<MR, NB>(out + m * ldo + j0, ldo, A + m * a_sm, a_sm, a_sk, B + j0, ldb, K, zero);
    if constexpr (MR > 4)
      for (; m + 4 <= M; m += 4)
        bcast_fma_tile<4, NB>(out + m * ldo + j0, ldo, A + m * a_sm, a_sm, a_sk, B + j0, ldb, K, zero);
    if constexpr (MR > 2)
      for (; m + 2 <= M; m += 2)
        bcast_fma_tile<2, NB>(out + m * ldo + j0, ldo, A + m * a_sm, a_sm, a_sk, B + j0, ldb, K, zero);
    for (; m < M; ++m)
      bcast_fma_tile<1, NB>(out + m * ldo + j0, ldo, A + m * a_sm, a_sm, a_sk, B + j0, ldb, K, zero);
  }
}

void bcast_fma_generic(float* out, int ldo, const float* A, int a_sm, int a_sk, const float* B,
                       int ldb, int M, int K, int W, bool zero) {
  for (int m = 0; m < M; ++m) {
    float* o = out + m * ldo;
    if (zero)
      for (int w = 0; w < W; ++w) o[w] = 0.0f;
    for (int k = 0; k < K; ++k) {
      float a = A[m * a_sm + k * a_sk];
      const float* b = B + k * ldb;
      for (int w = 0; w < W; ++w) o[w] += a * b[w];
    }
  }
}

void bcast_fma(float* out, int ldo, const float* A, int a_sm, int a_sk, const float* B, int ldb,
               int M, int K, int W, bool zero) {
  switch (W) {
    case 16: return bcast_fma_fixed<16>(out, ldo, A, a_sm, a_sk, B, ldb, M, K, zero);
    case 32: return bcast_fma_fixed<32>(out, ldo, A, a_sm, a_sk, B, ldb, M, K, zero);
    case 64: return bcast_fma_fixed<64>(out, ldo, A, a_sm, a_sk, B, ldb, M, K, zero);
    case 128: return bcast_fma_fixed<128>(out, ldo, A, a_sm, a_sk, B, ldb, M, K, zero);
    default: return bcast_fma_generic(out, ldo, A, a_sm, a_sk, B, ldb, M, K, W, zero);
  }
}

// max(row[lo:lim)), -inf when lim <= lo; 0 <= lo, lim <= KT. Vectorised, since max is exact in any
// order (a scalar loop here was a serial chain of maxss that cost ~a quarter of the forward). With
// AVX-512 the loads are masked to the visible keys, 16 at a time; elsewhere vectors over the whole
// tile with the invisible keys replaced by -inf (left to itself, GCC 12 makes this reduction scalar).
inline float visible_max(const float* row, int lo, int lim) {
#if CLM_ISA == CLM_ISA_AVX512
  __m512 vmx = _mm512_set1_ps(-INFINITY);
  for (int c0 = lo / 16 * 16; c0 < lim; c0 += 16) {
    const int left = lim - c0, skip = std::max(0, lo - c0);
    __mmask16 msk = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
    msk &= (__mmask16)(0xFFFFu << skip);
    vmx = _mm512_mask_max_ps(vmx, msk, vmx, _mm512_loadu_ps(row + c0));
  }
  return _mm512_reduce_max_ps(vmx);
#else
  typedef int32_t vint __attribute__((vector_size(VL * sizeof(int32_t))));
  vint lane;
  vfloat neg_inf;
  for (int i = 0; i < VL; ++i) {
    lane[i] = i;
    neg_inf[i] = -INFINITY;
  }
  vfloat vmx = neg_inf;
  for (int c0 = 0; c0 < KT; c0 += VL) {
    vfloat x = vload(row + c0);
    x = lane + c0 < lim && lane + c0 >= lo ? x : neg_inf;
    vmx = x > vmx ? x : vmx;
  }
  float part[VL];
  std::memcpy(part, &vmx, sizeof part);
  for (int w = VL / 2; w > 0; w /= 2)
    for (int i = 0; i < w; ++i) part[i] = std::max(part[i], part[i + w]);
  return part[0];
#endif
}

// Transpose rows [k0, k0+nk) of x ([T][hd]) into xt[hd][KT], zero-padding keys past nk.
void load_transposed(const float* x, int k0, int nk, int hd, float* xt) {
  for (int d = 0; d < hd; ++d) {
    float* row = xt + d * KT;
    for (int c = 0; c < nk; ++c) row[c] = x[int64_t(k0 + c) * hd + d];
    for (int c = nk; c < KT; ++c) row[c] = 0.0f;
  }
}

}  // namespace

void attention_fwd(const float* q, const float* k, const float* v, float* o, float* lse, int B,
                   int H, int Hkv, int Tq, int Tk, int Tk_cap, int hd, int window) {
  const int group = H / Hkv;
  const int nqt = (Tq + QT - 1) / QT;
  const int nkt = (Tk + KT - 1) / KT;
  const float scale = 1.0f / std::sqrt(float(hd));
  const int off = Tk - Tq;  // absolute position of query row 0
  // K^T once per call, as [hd][KT] tiles (zero past Tk): every query tile of a head reads all of
  // them, and transposing them again for each query tile cost more than the Q K^T products.
  const int64_t tile = int64_t(hd) * KT;
  std::unique_ptr<float[]> kT(new float[size_t(B) * Hkv * nkt * tile]);
#pragma omp parallel for schedule(static) collapse(2)
  for (int bk = 0; bk < B * Hkv; ++bk)
    for (int t = 0; t < nkt; ++t)
      load_transposed(k + int64_t(bk) * Tk_cap * hd, t * KT, std::min(KT, Tk - t * KT), hd,
                      kT.get() + (int64_t(bk) * nkt + t) * tile);
#pragma omp parallel
  {
    std::vector<float> qs(QT * hd), s(QT * KT), acc(QT * hd), m(QT), l(QT);
#pragma omp for schedule(dynamic) collapse(2)
    for (int bh = 0; bh < B * H; ++bh)
      for (int qi = nqt - 1; qi >= 0; --qi) {  // longest tiles first for better balance
        int b = bh / H, h = bh % H, kvh = h / group;
        const float* qb = q + (int64_t(bh) * Tq) * hd;
        const float* kTb = kT.get() + (int64_t(b) * Hkv + kvh) * nkt * tile;
        const float* vb = v + (int64_t(b) * Hkv + kvh) * Tk_cap * hd;
        int q0 = qi * QT, nq = std::min(QT, Tq - q0);
        for (int i = 0; i < nq * hd; ++i) qs[i] = qb[int64_t(q0) * hd + i] * scale;
        std::fill(acc.begin(), acc.end(), 0.0f);
        std::fill(m.begin(), m.end(), -INFINITY);
        std::fill(l.begin(), l.end(), 0.0f);
        int last_key = off + q0 + nq - 1;  // largest key any row of this tile may see
        // smallest key any row may see: the first row's window start (0 without a window)
        int first_key = window > 0 ? std::max(0, off + q0 - window + 1) : 0;
        for (int k0 = first_key / KT * KT; k0 <= last_key; k0 += KT) {
          int nk = std::min(KT, last_key + 1 - k0);
          const float* kt = kTb + (k0 / KT) * tile;
          bcast_fma(s.data(), KT, qs.data(), hd, 1, kt, KT, nq, hd, KT, true);  // S = Q K^T
          for (int r = 0; r < nq; ++r) {
            float* sr = s.data() + r * KT;
            int lim = std::min(nk, off + q0 + r - k0 + 1);  // keys [k0 + lo, k0 + lim) are visible
            int lo = window > 0 ? std::max(0, off + q0 + r - window + 1 - k0) : 0;
            float mx = std::max(m[r], visible_max(sr, lo, lim));
            if (mx == -INFINITY) {  // nothing visible yet (a window that starts past this tile)
              std::fill(sr, sr + KT, 0.0f);
              continue;
            }
            float corr = vexp(m[r] - mx);  // m = -inf the first time -> 0
            float sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int c = 0; c < KT; ++c) {
              const float p = keep_if(vexp(sr[c] - mx), c >= lo && c < lim);
              sr[c] = p;
              sum += p;
            }
            l[r] = l[r] * corr + sum;
            m[r] = mx;
            if (corr != 1.0f) {
              float* ar = acc.data() + r * hd;
              for (int d = 0; d < hd; ++d) ar[d] *= corr;
            }
          }
          // O += P V  (P is zero past each row's limit, so all nk keys can be summed)
          bcast_fma(acc.data(), hd, s.data(), KT, 1, vb + int64_t(k0) * hd, hd, nq, nk, hd, false);
        }
        float* ob = o + (int64_t(bh) * Tq) * hd;
        for (int r = 0; r < nq; ++r) {
          float inv = 1.0f / l[r];
          for (int d = 0; d < hd; ++d) ob[int64_t(q0 + r) * hd + d] = acc[r * hd + d] * inv;
          if (lse) lse[int64_t(bh) * Tq + q0 + r] = m[r] + std::log(l[r]);
        }
      }
  }
}

void attention_bwd(const float* q, const float* k, const float* v, const float* o,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, int B,
                   int H, int Hkv, int T, int hd, int window) {
  const int group = H / Hkv;
  const float scale = 1.0f / std::sqrt(float(hd));
#pragma omp parallel
  {
    std::vector<float> kt(hd * KT), vt(hd * KT), qs(QT * hd), p(QT * KT), ds(QT * KT), D(T);
#pragma omp for schedule(dynamic)
    for (int bk = 0; bk < B * Hkv; ++bk) {
      int b = bk / Hkv, kvh = bk % Hkv;
      const float* kb = k + int64_t(bk) * T * hd;
      const float* vb = v + int64_t(bk) * T * hd;
      float* dkb = dk + int64_t(bk) * T * hd;
      float* dvb = dv + int64_t(bk) * T * hd;
      std::memset(dkb, 0, sizeof(float) * T * hd);
      std::memset(dvb, 0, sizeof(float) * T * hd);
      for (int hh = 0; hh < group; ++hh) {
        int64_t bh = int64_t(b) * H + kvh * group + hh;
        const float* qb = q + bh * T * hd;
        const float* ob = o + bh * T * hd;
        const float* dob = dout + bh * T * hd;
        const float* lb = lse + bh * T;
        float* dqb = dq + bh * T * hd;
        std::memset(dqb, 0, sizeof(float) * T * hd);
        for (int t = 0; t < T; ++t) {  // D_t = dO_t . O_t (the softmax-backward row term)
          float acc = 0;
#pragma omp simd reduction(+ : acc)
          for (int d = 0; d < hd; ++d) acc += dob[int64_t(t) * hd + d] * ob[int64_t(t) * hd + d];
          D[t] = acc;
        }
        for (int k0 = 0; k0 < T; k0 += KT) {
          int nk = std::min(KT, T - k0);
          load_transposed(kb, k0, nk, hd, kt.data());
          load_transposed(vb, k0, nk, hd, vt.data());
          // Query tiles that see any of these keys: from the tile's own to the last key's window end.
          const int q_end = window > 0 ? std::min<int64_t>(T, int64_t(k0) + nk - 1 + window) : T;
          for (int q0 = (k0 / QT) * QT; q0 < q_end; q0 += QT) {
            int nq = std::min(QT, T - q0);
            for (int i = 0; i < nq * hd; ++i) qs[i] = qb[int64_t(q0) * hd + i] * scale;
            // S = (scale q) K^T  and  dP = dO V^T
            bcast_fma(p.data(), KT, qs.data(), hd, 1, kt.data(), KT, nq, hd, KT, true);
            bcast_fma(ds.data(), KT, dob + int64_t(q0) * hd, hd, 1, vt.data(), KT, nq, hd, KT, true);
            for (int r = 0; r < nq; ++r) {
              int t = q0 + r;
              int lim = std::min(nk, t - k0 + 1);
              int lo = window > 0 ? std::max(0, t - window + 1 - k0) : 0;
              float lt = lb[t], Dt = D[t];
              float* pr = p.data() + r * KT;
              float* dsr = ds.data() + r * KT;
#pragma omp simd
              for (int c = 0; c < KT; ++c) {
                const float pv = keep_if(vexp(pr[c] - lt), c >= lo && c < lim);
                pr[c] = pv;
                dsr[c] = pv * (dsr[c] - Dt) * scale;  // dS w.r.t. the unscaled q.k
              }
            }
            // dV += P^T dO ; dK += dS^T Q ; dQ += dS K
            bcast_fma(dvb + int64_t(k0) * hd, hd, p.data(), 1, KT, dob + int64_t(q0) * hd, hd, nk, nq,
                      hd, false);
            bcast_fma(dkb + int64_t(k0) * hd, hd, ds.data(), 1, KT, qb + int64_t(q0) * hd, hd, nk, nq,
                      hd, false);
            bcast_fma(dqb + int64_t(q0) * hd, hd, ds.data(), KT, 1, kb + int64_t(k0) * hd, hd, nq, nk,
                      hd, false);
          }
        }
      }
    }
  }
}

CLM_ISA_END

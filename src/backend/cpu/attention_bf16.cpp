// Causal grouped-query attention with bf16 products and fp32 accumulation, for CPUs with
// AVX512_BF16 (its VDPBF16PS adds the products of bf16 pairs into fp32 lanes). Compiled only into
// the avx512 variant; kernel_table.cpp offers it only when the CPU has the instruction. The tiles,
// the task split and the online softmax are attention.cpp's: forward one task per (batch, head,
// query tile), backward one per (batch, kv head), so every output element is summed by one thread
// in a fixed order whatever the thread count (deterministic, no atomics).
//
// Each product Q K^T, P V (forward) and S, dP = dO V^T, dV += P^T dO, dK += dS^T Q, dQ += dS K
// (backward) is one shape: out[m][0:W] (+)= sum_p A(m, p) . B[p][0:W], where A(m, p) is the bf16
// pair (a(m, 2p), a(m, 2p+1)) read as one 32-bit word and broadcast, and B[p] holds the pairs of
// the two operand rows 2p, 2p+1 interleaved. Every operand is rounded to bf16 (nearest even,
// AVX512_BF16's conversion, which flushes denormals to zero) into those layouts once per call,
// head or tile, never per product. The softmax, its max and log-sum-exp, D = rowsum(dO o O) and all
// accumulators stay fp32; W is padded to whole vectors of 16 with zeros, so every head dim takes
// the same register-blocked path. The 1/sqrt(hd) scale is applied to S in fp32, so the products
// see exactly the bf16 roundings of q, k, v (and of P, dO, dS).
#include <algorithm>
#include <cmath>
#include <cstdint>
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

#if CLM_ISA == CLM_ISA_AVX512
#pragma GCC push_options
#pragma GCC target("avx512bf16")  // added to the variant's AVX-512 target

namespace {

constexpr int QT = 64;  // query rows per tile (even: query pairs never straddle two tiles)
constexpr int KT = 64;  // keys per tile (even, a multiple of 16)
using u32 = uint32_t;

inline int pad16(int n) { return (n + 15) / 16 * 16; }
inline __mmask16 mask16(int n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// The bf16 of 16 floats in the low halves of 16 32-bit lanes.
inline __m512i bf16_lanes(__m512 x) {
  __m256bh h = _mm512_cvtneps_pbh(x);
  return _mm512_cvtepu16_epi32(reinterpret_cast<__m256i&>(h));
}

// y[r*ldy + p] = pair (x[r*ldx + 2p], x[r*ldx + 2p + 1]) for p < (n+1)/2, r < rows (zero past n):
// rows whose pairs run along the row, as the broadcast operand A or a row-major bf16 copy.
void pairs_along_rows(const float* x, int64_t ldx, int rows, int n, u32* y, int ldy) {
  const int n2 = (n + 1) / 2;
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    u32* yr = y + int64_t(r) * ldy;
    for (int c0 = 0; c0 < n; c0 += 32) {
      const __m512 a = _mm512_maskz_loadu_ps(mask16(n - c0), xr + c0);
      const __m512 b = _mm512_maskz_loadu_ps(mask16(n - c0 - 16), xr + c0 + 16);
      __m512bh h = _mm512_cvtne2ps_pbh(b, a);  // a in the low 16 halves
      _mm512_mask_storeu_epi32(yr + c0 / 2, mask16(n2 - c0 / 2), reinterpret_cast<__m512i&>(h));
    }
  }
}

// y[p*wp + c] = pair (x[2p][c], x[2p+1][c]) for c < w (zero for w <= c < wp, wp a multiple of 16),
// p < (rows+1)/2, the row past `rows` zero: the B layout of a row-major operand, or the A layout
// of its transpose (read with a_sm = 1, a_sk = wp).
void pairs_across_rows(const float* x, int64_t ldx, int rows, int w, int wp, u32* y) {
  for (int p = 0; p < (rows + 1) / 2; ++p) {
    const float* x0 = x + 2 * p * ldx;
    const bool has1 = 2 * p + 1 < rows;
    for (int c0 = 0; c0 < wp; c0 += 16) {
      const __mmask16 m = mask16(w - c0);
      const __m512i lo = bf16_lanes(_mm512_maskz_loadu_ps(m, x0 + c0));
      const __m512i hi = has1 ? bf16_lanes(_mm512_maskz_loadu_ps(m, x0 + ldx + c0)) : _mm512_setzero_si512();
      _mm512_storeu_si512(y + int64_t(p) * wp + c0, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

// The B layout of K^T (or V^T) for one key tile, [hd2][KT]: word (p, c) is key c's pair of head
// dims (2p, 2p+1); keys past nk are zero. `rows` is scratch of KT * hd2 words.
void key_tile_transposed(const float* x, int nk, int hd, u32* rows, u32* y) {
  const int hd2 = (hd + 1) / 2;
  pairs_along_rows(x, hd, nk, hd, rows, hd2);
  for (int p = 0; p < hd2; ++p) {
    u32* yp = y + p * KT;
    for (int c = 0; c < nk; ++c) yp[c] = rows[c * hd2 + p];
    for (int c = nk; c < KT; ++c) yp[c] = 0;
  }
}

inline __m512bh as_bh(__m512i x) { return reinterpret_cast<__m512bh&>(x); }

// R rows x NB vectors: out[i*ldo + 0:16NB] (+)= sum_{p<K2} A[i*a_sm + p*a_sk] . B[p*ldb + 0:16NB].
template <int R, int NB>
[[gnu::always_inline]] inline void dp_tile(float* __restrict out, int ldo, const u32* __restrict A,
                                           int a_sm, int a_sk, const u32* __restrict B, int ldb,
                                           int K2, bool zero) {
  __m512 acc[R][NB];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NB; ++v)
      acc[i][v] = zero ? _mm512_setzero_ps() : _mm512_loadu_ps(out + i * ldo + v * 16);
  for (int p = 0; p < K2; ++p) {
    __m512i b[NB];
    for (int v = 0; v < NB; ++v) {
      b[v] = _mm512_loadu_si512(B + int64_t(p) * ldb + v * 16);
      __asm__("" : "+v"(b[v]));  // one load per B vector, not one per row (attention.cpp)
    }
    for (int i = 0; i < R; ++i) {
      const __m512bh a = as_bh(_mm512_set1_epi32(int(A[i * a_sm + p * a_sk])));
      for (int v = 0; v < NB; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], a, as_bh(b[v]));
    }
  }
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NB; ++v) _mm512_storeu_ps(out + i * ldo + v * 16, acc[i][v]);
}

// Columns [j0, j0 + 16NB) of every row m < M: MR rows at a time, so the MR*NB accumulators and
// NB B vectors fit the 32 registers.
template <int NB>
void dp_cols(float* out, int ldo, const u32* A, int a_sm, int a_sk, const u32* B, int ldb, int M,
             int K2, int j0, bool zero) {
  constexpr int MR = NB >= 3 ? 6 : 8;
  int m = 0;
  for (; m + MR <= M; m += MR)
    dp_tile<MR, NB>(out + m * ldo + j0, ldo, A + m * a_sm, a_sm, a_sk, B + j0, ldb, K2, zero);
  for (; m < M; ++m)
    dp_tile<1, NB>(out + m * ldo + j0, ldo, A + m * a_sm, a_sm, a_sk, B + j0, ldb, K2, zero);
}

// out[m*ldo + 0:W] = (zero ? 0 : out) + sum_{p<K2} A(m, p) . B[p*ldb + 0:W], m < M; W % 16 == 0.
void dp(float* out, int ldo, const u32* A, int a_sm, int a_sk, const u32* B, int ldb, int M, int K2,
        int W, bool zero) {
  int j0 = 0;
  for (; j0 + 64 <= W; j0 += 64) dp_cols<4>(out, ldo, A, a_sm, a_sk, B, ldb, M, K2, j0, zero);
  switch ((W - j0) / 16) {
    case 3: return dp_cols<3>(out, ldo, A, a_sm, a_sk, B, ldb, M, K2, j0, zero);
    case 2: return dp_cols<2>(out, ldo, A, a_sm, a_sk, B, ldb, M, K2, j0, zero);
    case 1: return dp_cols<1>(out, ldo, A, a_sm, a_sk, B, ldb, M, K2, j0, zero);
    default: return;
  }
}

// max(row[lo:lim)), -inf when lim <= lo (masked loads of the visible keys).
inline float visible_max(const float* row, int lo, int lim) {
  __m512 vmx = _mm512_set1_ps(-INFINITY);
  for (int c0 = lo / 16 * 16; c0 < lim; c0 += 16) {
    const __mmask16 msk = mask16(lim - c0) & __mmask16(0xFFFFu << std::max(0, lo - c0));
    vmx = _mm512_mask_max_ps(vmx, msk, vmx, _mm512_loadu_ps(row + c0));
  }
  return _mm512_reduce_max_ps(vmx);
}

// D[t] = bf16(dO_t) . O_t: the row term of the softmax backward with dO rounded as in dP = dO V^T,
// so that each row of dS = P (dP - D) sums to ~0.
void rowterm(const float* dob, const float* ob, int T, int hd, float* D) {
  for (int t = 0; t < T; ++t) {
    __m512 acc = _mm512_setzero_ps();
    for (int d0 = 0; d0 < hd; d0 += 16) {
      const __mmask16 m = mask16(hd - d0);
      const __m512 g = _mm512_castsi512_ps(
          _mm512_slli_epi32(bf16_lanes(_mm512_maskz_loadu_ps(m, dob + int64_t(t) * hd + d0)), 16));
      acc = _mm512_fmadd_ps(g, _mm512_maskz_loadu_ps(m, ob + int64_t(t) * hd + d0), acc);
    }
    D[t] = _mm512_reduce_add_ps(acc);
  }
}

// One query tile's online-softmax update for the score tile s (rows < nq, unscaled Q K^T of keys
// [k0, k0 + KT); the scale is applied inside the exponent): s becomes P, m, l and the accumulator
// rows (width hdp) are rescaled.
void softmax_tile(float* s, int nq, int q0, int k0, int nk, int off, int window, float scale,
                  float* m, float* l, float* acc, int hdp) {
  for (int r = 0; r < nq; ++r) {
    float* sr = s + r * KT;
    const int lim = std::min(nk, off + q0 + r - k0 + 1);  // keys [k0 + lo, k0 + lim) are visible
    const int lo = window > 0 ? std::max(0, off + q0 + r - window + 1 - k0) : 0;
    const float mx = std::max(m[r], visible_max(sr, lo, lim) * scale);  // scale > 0: max commutes
    if (mx == -INFINITY) {  // nothing visible yet (a window that starts past this tile)
      std::fill(sr, sr + KT, 0.0f);
      continue;
    }
    const float corr = vexp(m[r] - mx);  // m = -inf the first time -> 0
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < KT; ++c) {
      const float p = keep_if(vexp(sr[c] * scale - mx), c >= lo && c < lim);
      sr[c] = p;
      sum += p;
    }
    l[r] = l[r] * corr + sum;
    m[r] = mx;
    if (corr != 1.0f)
      for (int d = 0; d < hdp; ++d) acc[r * hdp + d] *= corr;
  }
}

}  // namespace

void attention_fwd_bf16(const float* q, const float* k, const float* v, float* o, float* lse,
                        int B, int H, int Hkv, int Tq, int Tk, int Tk_cap, int hd, int window) {
  const int group = H / Hkv;
  const int nqt = (Tq + QT - 1) / QT, nkt = (Tk + KT - 1) / KT;
  const int hd2 = (hd + 1) / 2, hdp = pad16(hd), nkp = (Tk + 1) / 2;
  const float scale = 1.0f / std::sqrt(float(hd));
  const int off = Tk - Tq;  // absolute position of query row 0
  // Once per call: K^T tiles [hd2][KT] (the B of S = Q K^T) and V as pairs of keys [nkp][hdp]
  // (the B of O = P V), for every kv head.
  const int64_t ktile = int64_t(hd2) * KT;
  std::unique_ptr<u32[]> kp(new u32[size_t(B) * Hkv * nkt * ktile]);
  std::unique_ptr<u32[]> vp(new u32[size_t(B) * Hkv * nkp * hdp]);
#pragma omp parallel
  {
    std::vector<u32> rows(size_t(KT) * hd2);
#pragma omp for schedule(static) collapse(2)
    for (int bk = 0; bk < B * Hkv; ++bk)
      for (int t = 0; t < nkt; ++t) {
        const int k0 = t * KT, nk = std::min(KT, Tk - k0);
        const int64_t src = (int64_t(bk) * Tk_cap + k0) * hd;
        key_tile_transposed(k + src, nk, hd, rows.data(), kp.get() + (int64_t(bk) * nkt + t) * ktile);
        pairs_across_rows(v + src, hd, nk, hd, hdp, vp.get() + (int64_t(bk) * nkp + k0 / 2) * hdp);
      }
  }
#pragma omp parallel
  {
    std::vector<u32> qb(size_t(QT) * hd2), pb(QT * KT / 2);
    std::vector<float> s(QT * KT), acc(size_t(QT) * hdp), m(QT), l(QT);
#pragma omp for schedule(dynamic) collapse(2)
    for (int bh = 0; bh < B * H; ++bh)
      for (int qi = nqt - 1; qi >= 0; --qi) {  // longest tiles first for better balance
        const int b = bh / H, kvh = bh % H / group, bk = b * Hkv + kvh;
        const int q0 = qi * QT, nq = std::min(QT, Tq - q0);
        pairs_along_rows(q + (int64_t(bh) * Tq + q0) * hd, hd, nq, hd, qb.data(), hd2);
        std::fill(acc.begin(), acc.end(), 0.0f);
        std::fill(m.begin(), m.end(), -INFINITY);
        std::fill(l.begin(), l.end(), 0.0f);
        const int last_key = off + q0 + nq - 1;  // largest key any row of this tile may see
        const int first_key = window > 0 ? std::max(0, off + q0 - window + 1) : 0;
        for (int k0 = first_key / KT * KT; k0 <= last_key; k0 += KT) {
          const int nk = std::min(KT, last_key + 1 - k0);
          const u32* kt = kp.get() + (int64_t(bk) * nkt + k0 / KT) * ktile;
          dp(s.data(), KT, qb.data(), hd2, 1, kt, KT, nq, hd2, KT, true);  // S = Q K^T
          softmax_tile(s.data(), nq, q0, k0, nk, off, window, scale, m.data(), l.data(), acc.data(),
                       hdp);
          // O += P V (P is zero past each row's limit, so all nk keys can be summed)
          pairs_along_rows(s.data(), KT, nq, KT, pb.data(), KT / 2);
          dp(acc.data(), hdp, pb.data(), KT / 2, 1, vp.get() + (int64_t(bk) * nkp + k0 / 2) * hdp, hdp,
             nq, (nk + 1) / 2, hdp, false);
        }
        float* ob = o + (int64_t(bh) * Tq + q0) * hd;
        for (int r = 0; r < nq; ++r) {
          const float inv = 1.0f / l[r];
          for (int d = 0; d < hd; ++d) ob[int64_t(r) * hd + d] = acc[r * hdp + d] * inv;
          if (lse) lse[int64_t(bh) * Tq + q0 + r] = m[r] + std::log(l[r]);
        }
      }
  }
}

namespace {

// One kv head's operands in the backward's layouts, shared by the heads of its group.
struct KvOperands {
  std::vector<u32> kt, vt;  // K^T and V^T tiles [nkt][hd2][KT] (the B of S and dP)
  std::vector<u32> kpair;   // K as pairs of keys [(T+1)/2][hdp] (the B of dQ = dS K)
};

// One query head's operands: q and dO row-major bf16 [T][hd2] (the A of S and dP), and as pairs
// of queries [(T+1)/2][hdp] (the B of dK = dS^T Q and dV = P^T dO).
struct QOperands {
  std::vector<u32> qrow, dorow, qpair, dopair;
};

}  // namespace

void attention_bwd_bf16(const float* q, const float* k, const float* v, const float* o,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv, int B,
                        int H, int Hkv, int T, int hd, int window) {
  const int group = H / Hkv;
  const float scale = 1.0f / std::sqrt(float(hd));
  const int hd2 = (hd + 1) / 2, hdp = pad16(hd), nkt = (T + KT - 1) / KT, T2 = (T + 1) / 2;
  const int64_t ktile = int64_t(hd2) * KT;
#pragma omp parallel
  {
    KvOperands kv{std::vector<u32>(nkt * ktile), std::vector<u32>(nkt * ktile),
                  std::vector<u32>(size_t(T2) * hdp)};
    QOperands qo{std::vector<u32>(size_t(T) * hd2), std::vector<u32>(size_t(T) * hd2),
                 std::vector<u32>(size_t(T2) * hdp), std::vector<u32>(size_t(T2) * hdp)};
    std::vector<u32> rows(size_t(KT) * hd2), pt(QT / 2 * KT), dst(QT / 2 * KT), dsrow(QT * KT / 2);
    std::vector<float> p(QT * KT), ds(QT * KT), D(T);
    std::vector<float> dqa(size_t(T) * hdp), dka(size_t(2 * T2) * hdp), dva(size_t(2 * T2) * hdp);
#pragma omp for schedule(dynamic)
    for (int bk = 0; bk < B * Hkv; ++bk) {
      const int b = bk / Hkv, kvh = bk % Hkv;
      const float* kb = k + int64_t(bk) * T * hd;
      const float* vb = v + int64_t(bk) * T * hd;
      for (int t = 0; t < nkt; ++t) {
        const int k0 = t * KT, nk = std::min(KT, T - k0);
        key_tile_transposed(kb + int64_t(k0) * hd, nk, hd, rows.data(), kv.kt.data() + t * ktile);
        key_tile_transposed(vb + int64_t(k0) * hd, nk, hd, rows.data(), kv.vt.data() + t * ktile);
      }
      pairs_across_rows(kb, hd, T, hd, hdp, kv.kpair.data());
      std::fill(dka.begin(), dka.end(), 0.0f);
      std::fill(dva.begin(), dva.end(), 0.0f);
      for (int hh = 0; hh < group; ++hh) {
        const int64_t bh = int64_t(b) * H + kvh * group + hh;
        const float* qb = q + bh * T * hd;
        const float* dob = dout + bh * T * hd;
        const float* lb = lse + bh * T;
        pairs_along_rows(qb, hd, T, hd, qo.qrow.data(), hd2);
        pairs_along_rows(dob, hd, T, hd, qo.dorow.data(), hd2);
        pairs_across_rows(qb, hd, T, hd, hdp, qo.qpair.data());
        pairs_across_rows(dob, hd, T, hd, hdp, qo.dopair.data());
        rowterm(dob, o + bh * T * hd, T, hd, D.data());
        std::fill(dqa.begin(), dqa.end(), 0.0f);
        for (int k0 = 0; k0 < T; k0 += KT) {
          const int nk = std::min(KT, T - k0), t = k0 / KT;
          // Query tiles that see any of these keys: from the tile's own to the last key's window end.
          const int q_end = window > 0 ? std::min<int64_t>(T, int64_t(k0) + nk - 1 + window) : T;
          for (int q0 = (k0 / QT) * QT; q0 < q_end; q0 += QT) {
            const int nq = std::min(QT, T - q0);
            // S = Q K^T (unscaled) and dP = dO V^T
            dp(p.data(), KT, qo.qrow.data() + int64_t(q0) * hd2, hd2, 1, kv.kt.data() + t * ktile, KT,
               nq, hd2, KT, true);
            dp(ds.data(), KT, qo.dorow.data() + int64_t(q0) * hd2, hd2, 1, kv.vt.data() + t * ktile, KT,
               nq, hd2, KT, true);
            for (int r = 0; r < nq; ++r) {
              const int tq = q0 + r;
              const int lim = std::min(nk, tq - k0 + 1);
              const int lo = window > 0 ? std::max(0, tq - window + 1 - k0) : 0;
              const float lt = lb[tq], Dt = D[tq];
              float* pr = p.data() + r * KT;
              float* dsr = ds.data() + r * KT;
#pragma omp simd
              for (int c = 0; c < KT; ++c) {
                const float pv = keep_if(vexp(pr[c] * scale - lt), c >= lo && c < lim);
                pr[c] = pv;
                dsr[c] = pv * (dsr[c] - Dt) * scale;  // dS w.r.t. the unscaled q.k
              }
            }
            // dV += P^T dO ; dK += dS^T Q ; dQ += dS K
            const int nq2 = (nq + 1) / 2, nk2 = (nk + 1) / 2;
            pairs_across_rows(p.data(), KT, nq, KT, KT, pt.data());
            pairs_across_rows(ds.data(), KT, nq, KT, KT, dst.data());
            pairs_along_rows(ds.data(), KT, nq, KT, dsrow.data(), KT / 2);
            dp(dva.data() + int64_t(k0) * hdp, hdp, pt.data(), 1, KT,
               qo.dopair.data() + int64_t(q0 / 2) * hdp, hdp, nk, nq2, hdp, false);
            dp(dka.data() + int64_t(k0) * hdp, hdp, dst.data(), 1, KT,
               qo.qpair.data() + int64_t(q0 / 2) * hdp, hdp, nk, nq2, hdp, false);
            dp(dqa.data() + int64_t(q0) * hdp, hdp, dsrow.data(), KT / 2, 1,
               kv.kpair.data() + int64_t(k0 / 2) * hdp, hdp, nq, nk2, hdp, false);
          }
        }
        float* dqb = dq + bh * T * hd;
        for (int tq = 0; tq < T; ++tq)
          std::memcpy(dqb + int64_t(tq) * hd, dqa.data() + int64_t(tq) * hdp, sizeof(float) * hd);
      }
      float* dkb = dk + int64_t(bk) * T * hd;
      float* dvb = dv + int64_t(bk) * T * hd;
      for (int tk = 0; tk < T; ++tk) {
        std::memcpy(dkb + int64_t(tk) * hd, dka.data() + int64_t(tk) * hdp, sizeof(float) * hd);
        std::memcpy(dvb + int64_t(tk) * hd, dva.data() + int64_t(tk) * hdp, sizeof(float) * hd);
      }
    }
  }
}

#pragma GCC pop_options
#endif  // CLM_ISA == CLM_ISA_AVX512

CLM_ISA_END

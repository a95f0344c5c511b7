// Causal grouped-query attention, tiled with an online softmax (FlashAttention-style) on the CPU.
// Forward: each (batch, head, query tile) task streams key/value tiles, keeping a running max and
// sum per query row, so only a QTILE x KTILE score tile exists at a time. It saves the log-sum-exp
// per row. Backward recomputes each probability tile from q, k and that log-sum-exp; it runs one
// task per (batch, kv head), looping serially over the query heads of the group, so every
// gradient element is summed by one thread in a fixed order (deterministic, no atomics).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <omp.h>

#include "model/ops.h"
#include "model/vmath.h"

namespace clm {

namespace {
constexpr int QT = 64;  // query rows per tile
constexpr int KT = 64;  // keys per tile (the vectorised dimension of the score tile)
}  // namespace

void attention_fwd(const float* q, const float* k, const float* v, float* o, float* lse, int B,
                   int H, int Hkv, int Tq, int Tk, int Tk_cap, int hd) {
  const int group = H / Hkv;
  const int nqt = (Tq + QT - 1) / QT;
  const float scale = 1.0f / std::sqrt(float(hd));
  const int off = Tk - Tq;  // absolute position of query row 0
#pragma omp parallel
  {
    std::vector<float> qs(QT * hd), kt(hd * KT), s(QT * KT), acc(QT * hd), m(QT), l(QT);
#pragma omp for schedule(dynamic) collapse(2)
    for (int bh = 0; bh < B * H; ++bh)
      for (int qi = nqt - 1; qi >= 0; --qi) {  // longest tiles first for better balance
        int b = bh / H, h = bh % H, kvh = h / group;
        const float* qb = q + (int64_t(bh) * Tq) * hd;
        const float* kb = k + (int64_t(b) * Hkv + kvh) * Tk_cap * hd;
        const float* vb = v + (int64_t(b) * Hkv + kvh) * Tk_cap * hd;
        int q0 = qi * QT, nq = std::min(QT, Tq - q0);
        for (int r = 0; r < nq; ++r)
          for (int d = 0; d < hd; ++d) qs[r * hd + d] = qb[(q0 + r) * hd + d] * scale;
        std::fill(acc.begin(), acc.end(), 0.0f);
        std::fill(m.begin(), m.end(), -INFINITY);
        std::fill(l.begin(), l.end(), 0.0f);
        int last_key = off + q0 + nq - 1;  // largest key any row of this tile may see
        for (int k0 = 0; k0 <= last_key; k0 += KT) {
          int nk = std::min(KT, last_key + 1 - k0);
          // transpose the key tile so the score loop runs along keys (contiguous, vectorised)
          for (int c = 0; c < nk; ++c)
            for (int d = 0; d < hd; ++d) kt[d * KT + c] = kb[int64_t(k0 + c) * hd + d];
          for (int c = nk; c < KT; ++c)
            for (int d = 0; d < hd; ++d) kt[d * KT + c] = 0.0f;
          for (int r = 0; r < nq; ++r) {
            float* sr = s.data() + r * KT;
            for (int c = 0; c < KT; ++c) sr[c] = 0.0f;
            for (int d = 0; d < hd; ++d) {
              float qv = qs[r * hd + d];
              const float* ktd = kt.data() + d * KT;
              for (int c = 0; c < KT; ++c) sr[c] += qv * ktd[c];
            }
            int lim = std::min(nk, off + q0 + r - k0 + 1);  // keys [k0, k0+lim) are visible
            float mx = m[r];
            for (int c = 0; c < lim; ++c) mx = std::max(mx, sr[c]);
            float corr = vexp(m[r] - mx);  // m = -inf first time -> 0
            float sum = 0;
            for (int c = 0; c < KT; ++c) {
              float p = c < lim ? vexp(sr[c] - mx) : 0.0f;
              sr[c] = p;
              sum += p;
            }
            l[r] = l[r] * corr + sum;
            m[r] = mx;
            float* ar = acc.data() + r * hd;
            for (int d = 0; d < hd; ++d) ar[d] *= corr;
            for (int c = 0; c < lim; ++c) {
              float p = sr[c];
              const float* vr = vb + int64_t(k0 + c) * hd;
              for (int d = 0; d < hd; ++d) ar[d] += p * vr[d];
            }
          }
        }
        float* ob = o + (int64_t(bh) * Tq) * hd;
        for (int r = 0; r < nq; ++r) {
          float inv = 1.0f / l[r];
          for (int d = 0; d < hd; ++d) ob[(q0 + r) * hd + d] = acc[r * hd + d] * inv;
          if (lse) lse[int64_t(bh) * Tq + q0 + r] = m[r] + std::log(l[r]);
        }
      }
  }
}

void attention_bwd(const float* q, const float* k, const float* v, const float* o,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, int B,
                   int H, int Hkv, int T, int hd) {
  const int group = H / Hkv;
  const float scale = 1.0f / std::sqrt(float(hd));
#pragma omp parallel
  {
    std::vector<float> kt(hd * KT), vt(hd * KT), p(QT * KT), dp(QT * KT), D(T);
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
        int h = kvh * group + hh;
        int64_t bh = int64_t(b) * H + h;
        const float* qb = q + bh * T * hd;
        const float* ob = o + bh * T * hd;
        const float* dob = dout + bh * T * hd;
        const float* lb = lse + bh * T;
        float* dqb = dq + bh * T * hd;
        std::memset(dqb, 0, sizeof(float) * T * hd);
        for (int t = 0; t < T; ++t) {  // D_t = dO_t . O_t (the softmax-backward row term)
          float acc = 0;
          for (int d = 0; d < hd; ++d) acc += dob[t * hd + d] * ob[t * hd + d];
          D[t] = acc;
        }
        for (int k0 = 0; k0 < T; k0 += KT) {
          int nk = std::min(KT, T - k0);
          for (int c = 0; c < KT; ++c)
            for (int d = 0; d < hd; ++d) {
              kt[d * KT + c] = c < nk ? kb[int64_t(k0 + c) * hd + d] : 0.0f;
              vt[d * KT + c] = c < nk ? vb[int64_t(k0 + c) * hd + d] : 0.0f;
            }
          for (int q0 = (k0 / QT) * QT; q0 < T; q0 += QT) {
            int nq = std::min(QT, T - q0);
            for (int r = 0; r < nq; ++r) {
              int t = q0 + r;
              float* pr = p.data() + r * KT;
              float* dpr = dp.data() + r * KT;
              for (int c = 0; c < KT; ++c) pr[c] = dpr[c] = 0.0f;
              const float* qr = qb + int64_t(t) * hd;
              const float* dor = dob + int64_t(t) * hd;
              for (int d = 0; d < hd; ++d) {
                float qv = qr[d] * scale, dv_ = dor[d];
                const float* ktd = kt.data() + d * KT;
                const float* vtd = vt.data() + d * KT;
                for (int c = 0; c < KT; ++c) {
                  pr[c] += qv * ktd[c];
                  dpr[c] += dv_ * vtd[c];
                }
              }
              int lim = std::min(nk, t - k0 + 1);
              float lt = lb[t], Dt = D[t];
              for (int c = 0; c < KT; ++c) {
                float pv = c < lim ? vexp(pr[c] - lt) : 0.0f;
                pr[c] = pv;
                dpr[c] = pv * (dpr[c] - Dt) * scale;  // dS (w.r.t. the unscaled q.k)
              }
            }
            // dV += P^T dO ; dK += dS^T Q ; dQ += dS K   (all along hd, vectorised)
            for (int r = 0; r < nq; ++r) {
              int t = q0 + r;
              const float* pr = p.data() + r * KT;
              const float* dsr = dp.data() + r * KT;
              const float* qr = qb + int64_t(t) * hd;
              const float* dor = dob + int64_t(t) * hd;
              float* dqr = dqb + int64_t(t) * hd;
              int lim = std::min(nk, t - k0 + 1);
              for (int c = 0; c < lim; ++c) {
                float pc = pr[c], sc = dsr[c];
                float* dvr = dvb + int64_t(k0 + c) * hd;
                float* dkr = dkb + int64_t(k0 + c) * hd;
                const float* kr = kb + int64_t(k0 + c) * hd;
                for (int d = 0; d < hd; ++d) {
                  dvr[d] += pc * dor[d];
                  dkr[d] += sc * qr[d];
                  dqr[d] += sc * kr[d];
                }
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace clm

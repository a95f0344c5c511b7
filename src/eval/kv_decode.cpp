// KV-cache forward (see kv_decode.h). Mirrors GPT's forward layer by layer — embedding; per block:
// RMSNorm, fused qkv matmul, optional qk RMSNorm, RoPE at absolute positions, causal GQA attention
// over the cached keys, output projection, residual; RMSNorm, MLP, residual; final RMSNorm; head with
// logit softcap — but keeps no activations for backward and stores K/V per layer for later steps.
#include "eval/kv_decode.h"

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "core/common.h"
#include "model/gpt.h"
#include "backend/cpu/ops.h"

namespace clm {

namespace {

// A weight in the model's matmul precision (bf16 bits or fp32), owned by the decoder.
struct W {
  std::vector<float> f;
  std::vector<bf16> h;
  const void* ptr(MatPrec p) const { return p == MatPrec::F32 ? (const void*)f.data() : (const void*)h.data(); }
};

}  // namespace

struct KVDecoderImpl {
  ModelConfig cfg;
  MatPrec prec;
  int max_B, max_T, B = 0, pos = 0, n_last = 0;
  bool one_shot = false;
  std::vector<float> shared_k, shared_v;  // one_shot: the K/V buffer every layer uses
  int d, H, Hkv, hd, Hd, V, Vp, L, qw, kvw, qkvw, hw;
  struct Layer {
    const float *attn_g = nullptr, *qn_g = nullptr, *kn_g = nullptr, *mlp_g = nullptr;
    W wqkv, wo, w_in, w_out;
    std::vector<float> k, v;  // [max_B, Hkv, max_T, hd]
  };
  std::vector<Layer> layers;
  std::vector<float> wte;  // fp32 embedding table (lookup)
  const float* final_g = nullptr;
  W head;
  std::vector<float> gains;  // copies of the norm gains (stable pointers)
  std::vector<float> cos_t, sin_t;
  // scratch for one append of N = B*n rows
  std::vector<float> x, mid, proj, tmp, rstd, qkv, q, knew, vnew, qraw, kraw, o, h, act, xf;
  std::vector<float> mmbuf;  // matmul-precision input (bf16 bits packed in the float buffer)

  const void* to_mm(const float* src, int64_t n) {
    if (prec == MatPrec::F32) return src;
    if ((int64_t)mmbuf.size() * 2 < n) mmbuf.resize((n + 1) / 2);
    f32_to_bf16(src, reinterpret_cast<bf16*>(mmbuf.data()), n);
    return mmbuf.data();
  }
  void linear(const float* xin, const W& w, float* y, int64_t N, int64_t in, int64_t out) {
    linear_fwd(prec, to_mm(xin, N * in), w.ptr(prec), y, N, in, out);
  }

  // A run of packed tokens that attends as one causal sequence: tokens [off, off+n) sit at positions
  // pos0.. and see the keys already cached at [0, pos0) of their cache area plus their own. The area
  // starts `cache` floats into the layer's K/V buffer and holds ldT positions per kv head.
  struct Seg { int64_t off; int n; int pos0; int64_t cache; int ldT; };
  std::vector<float> group_k, group_v;  // score_groups: one area per group, reused by every layer
  std::vector<float> head_logits;       // score_rows: logits of a chunk of scored positions

  void forward(const int32_t* tokens, int64_t N, const std::vector<Seg>& segs, bool group_cache);
  void score_rows(int64_t N, const int32_t* targets, float* loss, int32_t* argmax);
};

// Embedding, every block and the final norm for N packed tokens; xf gets the final hidden states.
// Row-wise work (norms, matmuls, MLP) runs on all N tokens at once; the head layout, RoPE, the cache
// writes and attention run per segment. Heads are laid out segment after segment, each [H, n, hd],
// which for B equal rows is exactly [B, H, n, hd].
void KVDecoderImpl::forward(const int32_t* tokens, int64_t N, const std::vector<Seg>& segs, bool group_cache) {
  const int64_t dd = d;
  for (int64_t i = 0; i < N; i++)
    if (tokens[i] < 0 || tokens[i] >= V) fail("KV decoder: token id {} out of range [0, {})", tokens[i], V);
  const int64_t wmax = std::max<int64_t>({dd, qkvw, hw, Hd, qw});
  auto sz = [](std::vector<float>& v, int64_t k) { if ((int64_t)v.size() < k) v.resize(k); };
  sz(x, N * dd); sz(mid, N * dd); sz(proj, N * dd); sz(tmp, N * wmax); sz(rstd, N * std::max(H, 1));
  sz(qkv, N * qkvw); sz(q, N * qw); sz(knew, N * kvw); sz(vnew, N * kvw);
  sz(qraw, N * qw); sz(kraw, N * kvw); sz(o, N * qw); sz(h, N * hw); sz(act, N * Hd);
  sz(xf, N * dd);
  const float eps = cfg.norm_eps;
  embedding_fwd(tokens, wte.data(), x.data(), N, dd);
  for (int l = 0; l < L; l++) {
    auto& ly = layers[l];
    float* kc = group_cache ? group_k.data() : one_shot ? shared_k.data() : ly.k.data();
    float* vc = group_cache ? group_v.data() : one_shot ? shared_v.data() : ly.v.data();
    // attention
    rmsnorm_fwd(x.data(), ly.attn_g, tmp.data(), rstd.data(), N, dd, eps);
    linear(tmp.data(), ly.wqkv, qkv.data(), N, dd, qkvw);
    float* qd = cfg.qk_norm ? qraw.data() : q.data();
    float* kd = cfg.qk_norm ? kraw.data() : knew.data();
    for (const Seg& s : segs) {
      const float* src = qkv.data() + s.off * qkvw;
      split_heads(src, qkvw, qd + s.off * qw, 1, s.n, H, hd);
      split_heads(src + qw, qkvw, kd + s.off * kvw, 1, s.n, Hkv, hd);
      split_heads(src + qw + kvw, qkvw, vnew.data() + s.off * kvw, 1, s.n, Hkv, hd);
    }
    if (cfg.qk_norm) {
      rmsnorm_fwd(qraw.data(), ly.qn_g, q.data(), rstd.data(), N * H, hd, eps);
      rmsnorm_fwd(kraw.data(), ly.kn_g, knew.data(), rstd.data(), N * Hkv, hd, eps);
    }
    for (const Seg& s : segs) {
      float* qs = q.data() + s.off * qw;
      float* ks = knew.data() + s.off * kvw;
      const float* vs = vnew.data() + s.off * kvw;
      rope_fwd(qs, (int64_t)H * s.n, s.n, hd, cos_t.data(), sin_t.data(), s.pos0);
      rope_fwd(ks, (int64_t)Hkv * s.n, s.n, hd, cos_t.data(), sin_t.data(), s.pos0);
      // the segment's keys/values into its cache area at positions [pos0, pos0+n)
      for (int hh = 0; hh < Hkv; hh++) {
        size_t from = (size_t)hh * s.n * hd, to = s.cache + ((size_t)hh * s.ldT + s.pos0) * hd;
        std::memcpy(kc + to, ks + from, sizeof(float) * s.n * hd);
        std::memcpy(vc + to, vs + from, sizeof(float) * s.n * hd);
      }
      attention_fwd(qs, kc + s.cache, vc + s.cache, o.data() + s.off * qw, nullptr, 1, H, Hkv, s.n,
                    s.pos0 + s.n, s.ldT, hd);
      merge_heads(o.data() + s.off * qw, tmp.data() + s.off * qw, qw, 1, s.n, H, hd);
    }
    linear(tmp.data(), ly.wo, proj.data(), N, qw, dd);
    residual_fwd(x.data(), proj.data(), mid.data(), N * dd);
    // MLP
    rmsnorm_fwd(mid.data(), ly.mlp_g, tmp.data(), rstd.data(), N, dd, eps);
    linear(tmp.data(), ly.w_in, h.data(), N, dd, hw);
    if (cfg.activation == "relu2") relu2_fwd(h.data(), act.data(), N * Hd);
    else if (cfg.activation == "gelu") gelu_fwd(h.data(), act.data(), N * Hd);
    else swiglu_fwd(h.data(), act.data(), N, Hd);
    linear(act.data(), ly.w_out, proj.data(), N, Hd, dd);
    residual_fwd(mid.data(), proj.data(), x.data(), N * dd);
  }
  rmsnorm_fwd(x.data(), final_g, xf.data(), rstd.data(), N, dd, eps);
}

// Loss and argmax at the positions with a target; the head matmul runs only on those rows.
void KVDecoderImpl::score_rows(int64_t N, const int32_t* targets, float* loss, int32_t* argmax) {
  std::vector<int64_t> at;
  for (int64_t i = 0; i < N; i++) {
    loss[i] = 0.0f;
    argmax[i] = -1;
    if (targets[i] >= 0) at.push_back(i);
  }
  // The head in chunks of rows so the logits buffer stays small (vocab can be large).
  // Kept between calls: scoring calls are many, and a fresh multi-megabyte buffer each time costs
  // page faults and zeroing comparable to the head matmul itself.
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>((int64_t)at.size(), (int64_t(1) << 22) / Vp));
  if ((int64_t)head_logits.size() < chunk * Vp) head_logits.resize((size_t)chunk * Vp);
  float* logits = head_logits.data();
  std::vector<float> rows((size_t)chunk * d), lo(chunk);
  std::vector<int32_t> tg(chunk), am(chunk);
  for (size_t c0 = 0; c0 < at.size(); c0 += chunk) {
    int64_t nr = std::min<int64_t>(chunk, (int64_t)at.size() - (int64_t)c0);
    for (int64_t r = 0; r < nr; r++) {
      std::memcpy(rows.data() + r * d, xf.data() + at[c0 + r] * d, sizeof(float) * d);
      tg[r] = targets[at[c0 + r]];
      if (tg[r] >= V) fail("KV decoder: target id {} out of range [0, {})", tg[r], V);
    }
    linear(rows.data(), head, logits, nr, d, Vp);
    softcap_xent(logits, tg.data(), nr, V, Vp, cfg.logit_softcap, lo.data(), am.data(), false, 0.0f);
    for (int64_t r = 0; r < nr; r++) {
      loss[at[c0 + r]] = lo[r];
      argmax[at[c0 + r]] = am[r];
    }
  }
}

KVDecoder::KVDecoder(GPT& model, int max_B, int max_T, bool one_shot) : impl(std::make_unique<KVDecoderImpl>()) {
  KVDecoderImpl& m = *impl;
  const ModelConfig& c = model.config();
  if (max_B <= 0 || max_T <= 0) fail("KV decoder: batch and length must be positive");
  m.cfg = c;
  m.one_shot = one_shot;
  if (one_shot) {
    m.shared_k.assign((size_t)max_B * c.n_kv_head * max_T * c.head_dim, 0.0f);
    m.shared_v.assign(m.shared_k.size(), 0.0f);
  }
  m.prec = model.matmul_precision();
  m.max_B = max_B;
  m.max_T = max_T;
  m.d = c.d_model; m.H = c.n_head; m.Hkv = c.n_kv_head; m.hd = c.head_dim; m.L = c.n_layer;
  m.V = c.vocab_size; m.Vp = c.padded_vocab(); m.Hd = c.mlp_hidden();
  m.qw = m.H * m.hd; m.kvw = m.Hkv * m.hd; m.qkvw = m.qw + 2 * m.kvw;
  m.hw = c.activation == "swiglu" ? 2 * m.Hd : m.Hd;

  std::map<std::string, const Param*> byname;
  for (const Param& p : model.params()) byname[p.name] = &p;
  std::map<std::string, std::vector<float>> host;
  auto get = [&](const std::string& name, int64_t numel) -> const float* {
    auto it = byname.find(name);
    if (it == byname.end()) fail("KV decoder: the model has no parameter '{}'", name);
    if (it->second->numel() != numel) fail("KV decoder: parameter '{}' has {} values, expected {}", name, it->second->numel(), numel);
    std::vector<float>& h = host[name];  // the decoder computes on the host: copy from the device
    if (h.empty()) {
      h.resize(size_t(numel));
      it->second->to_host(h.data());
    }
    return h.data();
  };
  // Weights concatenated the way GPT's fused matmuls read them (wq|wk|wv, w_in|w_gate).
  auto make = [&](std::vector<std::pair<const float*, int64_t>> parts) {
    W w;
    for (auto& [p, n] : parts) w.f.insert(w.f.end(), p, p + n);
    if (m.prec == MatPrec::BF16) {
      w.h.resize(w.f.size());
      f32_to_bf16(w.f.data(), w.h.data(), (int64_t)w.f.size());
      std::vector<float>().swap(w.f);
    }
    return w;
  };
  const int64_t d = m.d;
  // Gains are copied so the decoder never points into a model that may be freed or trained.
  std::vector<std::pair<const float**, std::pair<const float*, int64_t>>> gain_refs;
  m.layers.resize(m.L);
  for (int l = 0; l < m.L; l++) {
    auto& ly = m.layers[l];
    std::string pre = fmt::format("blocks.{}.", l);
    ly.wqkv = make({{get(pre + "attn.wq", m.qw * d), m.qw * d}, {get(pre + "attn.wk", m.kvw * d), m.kvw * d},
                    {get(pre + "attn.wv", m.kvw * d), m.kvw * d}});
    ly.wo = make({{get(pre + "attn.wo", d * m.qw), d * m.qw}});
    if (c.activation == "swiglu")
      ly.w_in = make({{get(pre + "mlp.w_in", m.Hd * d), m.Hd * d}, {get(pre + "mlp.w_gate", m.Hd * d), m.Hd * d}});
    else
      ly.w_in = make({{get(pre + "mlp.w_in", m.Hd * d), m.Hd * d}});
    ly.w_out = make({{get(pre + "mlp.w_out", d * m.Hd), d * m.Hd}});
    if (c.norm_gain) {
      gain_refs.push_back({&ly.attn_g, {get(pre + "attn_norm.gain", d), d}});
      gain_refs.push_back({&ly.mlp_g, {get(pre + "mlp_norm.gain", d), d}});
      if (c.qk_norm) {
        gain_refs.push_back({&ly.qn_g, {get(pre + "attn.q_norm.gain", m.hd), m.hd}});
        gain_refs.push_back({&ly.kn_g, {get(pre + "attn.k_norm.gain", m.hd), m.hd}});
      }
    }
    if (!one_shot) {
      ly.k.assign((size_t)max_B * m.Hkv * max_T * m.hd, 0.0f);
      ly.v.assign((size_t)max_B * m.Hkv * max_T * m.hd, 0.0f);
    }
  }
  if (c.norm_gain) gain_refs.push_back({&m.final_g, {get("final_norm.gain", d), d}});
  for (auto& g : gain_refs) m.gains.insert(m.gains.end(), g.second.first, g.second.first + g.second.second);
  size_t off = 0;
  for (auto& g : gain_refs) { *g.first = m.gains.data() + off; off += g.second.second; }
  const float* wte = get("wte", (int64_t)m.Vp * d);
  m.wte.assign(wte, wte + (int64_t)m.Vp * d);
  const float* head = c.tie_embeddings ? wte : get("lm_head", (int64_t)m.Vp * d);
  m.head = make({{head, (int64_t)m.Vp * d}});
  m.cos_t.resize((size_t)max_T * m.hd / 2);
  m.sin_t.resize((size_t)max_T * m.hd / 2);
  rope_tables(m.cos_t.data(), m.sin_t.data(), max_T, m.hd, c.rope_base);
}

KVDecoder::~KVDecoder() = default;
KVDecoder::KVDecoder(KVDecoder&&) noexcept = default;

void KVDecoder::reset() {
  impl->pos = 0;
  impl->B = 0;
  impl->n_last = 0;
}
int KVDecoder::pos() const { return impl->pos; }
const ModelConfig& KVDecoder::config() const { return impl->cfg; }

void KVDecoder::append(const int32_t* tokens, int B, int n) {
  KVDecoderImpl& m = *impl;
  if (B <= 0 || B > m.max_B) fail("KV decoder: batch {} outside 1..{}", B, m.max_B);
  if (m.one_shot && m.pos > 0) fail("KV decoder: a one-shot decoder takes one append per reset");
  if (m.pos > 0 && B != m.B) fail("KV decoder: batch changed from {} to {} without a reset", m.B, B);
  if (n <= 0 || m.pos + n > m.max_T)
    fail("KV decoder: {} cached + {} new positions exceed the capacity {}", m.pos, n, m.max_T);
  m.B = B;
  // Row b is one segment: its n tokens continue row b's cache at position pos.
  std::vector<KVDecoderImpl::Seg> segs(B);
  for (int b = 0; b < B; b++)
    segs[b] = {(int64_t)b * n, n, m.pos, (int64_t)b * m.Hkv * m.max_T * m.hd, m.max_T};
  m.forward(tokens, (int64_t)B * n, segs, /*group_cache=*/false);
  m.pos += n;
  m.n_last = n;
}

void KVDecoder::score_groups(const int32_t* tokens, const std::vector<PrefixGroup>& groups,
                             const int32_t* targets, float* loss, int32_t* argmax) {
  KVDecoderImpl& m = *impl;
  // Each group gets its own cache area of (prefix + longest branch) positions. Segments run in
  // packed order, so within a layer the prefix's keys are in place before any branch attends to
  // them, and each branch writes its keys just after the prefix, over the previous branch's.
  std::vector<KVDecoderImpl::Seg> segs;
  int64_t off = 0, cache = 0;
  for (const PrefixGroup& g : groups) {
    int longest = 0;
    for (int n : g.branches) {
      if (n <= 0) fail("KV decoder: an empty branch");
      longest = std::max(longest, n);
    }
    if (g.prefix < 0 || g.prefix + longest > m.max_T || g.prefix + longest == 0)
      fail("KV decoder: a group of {} + {} positions outside 1..{}", g.prefix, longest, m.max_T);
    const int ldT = g.prefix + longest;
    if (g.prefix > 0) segs.push_back({off, g.prefix, 0, cache, ldT});
    off += g.prefix;
    for (int n : g.branches) {
      segs.push_back({off, n, g.prefix, cache, ldT});
      off += n;
    }
    cache += (int64_t)m.Hkv * ldT * m.hd;
  }
  if (off == 0) fail("KV decoder: no tokens to score");
  if ((int64_t)m.group_k.size() < cache) {
    m.group_k.resize(cache);
    m.group_v.resize(cache);
  }
  m.forward(tokens, off, segs, /*group_cache=*/true);
  m.pos = 0;  // the per-row caches were not touched but no longer match the scratch
  m.B = 0;
  m.n_last = 0;
  m.score_rows(off, targets, loss, argmax);
}

void KVDecoder::last_logits(float* out) {
  KVDecoderImpl& m = *impl;
  if (m.n_last == 0) fail("KV decoder: last_logits before append");
  const int64_t d = m.d;
  std::vector<float> rows((size_t)m.B * d);
  for (int b = 0; b < m.B; b++)
    std::memcpy(rows.data() + (size_t)b * d, m.xf.data() + ((size_t)b * m.n_last + m.n_last - 1) * d, sizeof(float) * d);
  m.linear(rows.data(), m.head, out, m.B, d, m.Vp);
  softcap_fwd(out, (int64_t)m.B * m.Vp, m.cfg.logit_softcap);
  for (int b = 0; b < m.B; b++)
    for (int j = m.V; j < m.Vp; j++) out[(size_t)b * m.Vp + j] = -INFINITY;
}

void KVDecoder::score(const int32_t* targets, float* loss, int32_t* argmax) {
  KVDecoderImpl& m = *impl;
  if (m.n_last == 0) fail("KV decoder: score before append");
  m.score_rows((int64_t)m.B * m.n_last, targets, loss, argmax);
}

}  // namespace clm

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
#include "model/ops.h"

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
};

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
  auto get = [&](const std::string& name, int64_t numel) -> const float* {
    auto it = byname.find(name);
    if (it == byname.end()) fail("KV decoder: the model has no parameter '{}'", name);
    if (it->second->numel() != numel) fail("KV decoder: parameter '{}' has {} values, expected {}", name, it->second->numel(), numel);
    return it->second->data;
  };
  auto opt = [&](const std::string& name) -> const float* {
    auto it = byname.find(name);
    return it == byname.end() ? nullptr : it->second->data;
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
  (void)opt;
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
  const int64_t N = (int64_t)B * n, d = m.d;
  const int pos0 = m.pos, Tk = pos0 + n;
  for (int64_t i = 0; i < N; i++)
    if (tokens[i] < 0 || tokens[i] >= m.V) fail("KV decoder: token id {} out of range [0, {})", tokens[i], m.V);
  const int64_t wmax = std::max<int64_t>({d, m.qkvw, m.hw, m.Hd, m.qw});
  auto sz = [](std::vector<float>& v, int64_t k) { if ((int64_t)v.size() < k) v.resize(k); };
  sz(m.x, N * d); sz(m.mid, N * d); sz(m.proj, N * d); sz(m.tmp, N * wmax); sz(m.rstd, N * std::max(m.H, 1));
  sz(m.qkv, N * m.qkvw); sz(m.q, N * m.qw); sz(m.knew, N * m.kvw); sz(m.vnew, N * m.kvw);
  sz(m.qraw, N * m.qw); sz(m.kraw, N * m.kvw); sz(m.o, N * m.qw); sz(m.h, N * m.hw); sz(m.act, N * m.Hd);
  sz(m.xf, N * d);
  const float eps = m.cfg.norm_eps;
  embedding_fwd(tokens, m.wte.data(), m.x.data(), N, d);
  for (int l = 0; l < m.L; l++) {
    auto& ly = m.layers[l];
    float* kc = m.one_shot ? m.shared_k.data() : ly.k.data();
    float* vc = m.one_shot ? m.shared_v.data() : ly.v.data();
    // attention
    rmsnorm_fwd(m.x.data(), ly.attn_g, m.tmp.data(), m.rstd.data(), N, d, eps);
    m.linear(m.tmp.data(), ly.wqkv, m.qkv.data(), N, d, m.qkvw);
    float* qd = m.cfg.qk_norm ? m.qraw.data() : m.q.data();
    float* kd = m.cfg.qk_norm ? m.kraw.data() : m.knew.data();
    split_heads(m.qkv.data(), m.qkvw, qd, B, n, m.H, m.hd);
    split_heads(m.qkv.data() + m.qw, m.qkvw, kd, B, n, m.Hkv, m.hd);
    split_heads(m.qkv.data() + m.qw + m.kvw, m.qkvw, m.vnew.data(), B, n, m.Hkv, m.hd);
    if (m.cfg.qk_norm) {
      rmsnorm_fwd(m.qraw.data(), ly.qn_g, m.q.data(), m.rstd.data(), N * m.H, m.hd, eps);
      rmsnorm_fwd(m.kraw.data(), ly.kn_g, m.knew.data(), m.rstd.data(), N * m.Hkv, m.hd, eps);
    }
    rope_fwd(m.q.data(), N * m.H, n, m.hd, m.cos_t.data(), m.sin_t.data(), pos0);
    rope_fwd(m.knew.data(), N * m.Hkv, n, m.hd, m.cos_t.data(), m.sin_t.data(), pos0);
    // new keys/values into the cache at positions [pos0, pos0+n)
    for (int b = 0; b < B; b++)
      for (int hh = 0; hh < m.Hkv; hh++) {
        size_t src = (((size_t)b * m.Hkv + hh) * n) * m.hd;
        size_t dst = (((size_t)b * m.Hkv + hh) * m.max_T + pos0) * m.hd;
        std::memcpy(kc + dst, m.knew.data() + src, sizeof(float) * n * m.hd);
        std::memcpy(vc + dst, m.vnew.data() + src, sizeof(float) * n * m.hd);
      }
    attention_fwd(m.q.data(), kc, vc, m.o.data(), nullptr, B, m.H, m.Hkv, n, Tk, m.max_T, m.hd);
    merge_heads(m.o.data(), m.tmp.data(), m.qw, B, n, m.H, m.hd);
    m.linear(m.tmp.data(), ly.wo, m.proj.data(), N, m.qw, d);
    residual_fwd(m.x.data(), m.proj.data(), m.mid.data(), N * d);
    // MLP
    rmsnorm_fwd(m.mid.data(), ly.mlp_g, m.tmp.data(), m.rstd.data(), N, d, eps);
    m.linear(m.tmp.data(), ly.w_in, m.h.data(), N, d, m.hw);
    if (m.cfg.activation == "relu2") relu2_fwd(m.h.data(), m.act.data(), N * m.Hd);
    else if (m.cfg.activation == "gelu") gelu_fwd(m.h.data(), m.act.data(), N * m.Hd);
    else swiglu_fwd(m.h.data(), m.act.data(), N, m.Hd);
    m.linear(m.act.data(), ly.w_out, m.proj.data(), N, m.Hd, d);
    residual_fwd(m.mid.data(), m.proj.data(), m.x.data(), N * d);
  }
  rmsnorm_fwd(m.x.data(), m.final_g, m.xf.data(), m.rstd.data(), N, d, eps);
  m.pos += n;
  m.n_last = n;
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
  const int64_t N = (int64_t)m.B * m.n_last, d = m.d;
  std::vector<int64_t> at;
  for (int64_t i = 0; i < N; i++) {
    loss[i] = 0.0f;
    argmax[i] = -1;
    if (targets[i] >= 0) at.push_back(i);
  }
  // The head in chunks of rows so the logits buffer stays small (vocab can be large).
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>((int64_t)at.size(), (int64_t(1) << 22) / m.Vp));
  std::vector<float> rows((size_t)chunk * d), logits((size_t)chunk * m.Vp), l(chunk);
  std::vector<int32_t> tg(chunk), am(chunk);
  for (size_t c0 = 0; c0 < at.size(); c0 += chunk) {
    int64_t nr = std::min<int64_t>(chunk, (int64_t)at.size() - (int64_t)c0);
    for (int64_t r = 0; r < nr; r++) {
      std::memcpy(rows.data() + r * d, m.xf.data() + at[c0 + r] * d, sizeof(float) * d);
      tg[r] = targets[at[c0 + r]];
      if (tg[r] >= m.V) fail("KV decoder: target id {} out of range [0, {})", tg[r], m.V);
    }
    m.linear(rows.data(), m.head, logits.data(), nr, d, m.Vp);
    softcap_xent(logits.data(), tg.data(), nr, m.V, m.Vp, m.cfg.logit_softcap, l.data(), am.data(), false, 0.0f);
    for (int64_t r = 0; r < nr; r++) {
      loss[at[c0 + r]] = l[r];
      argmax[at[c0 + r]] = am[r];
    }
  }
}

}  // namespace clm

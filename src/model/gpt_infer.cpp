// The GPT's cached forward for inference (driven by eval/kv_decode.h): the KV cache, the scratch
// it runs in, the cached block (the training block's halves around attention over each segment's
// cache area) and the head read at chosen rows of its output. Nothing is kept for a backward.
#include <algorithm>

#include "model/gpt_impl.h"

namespace clm {

// ---- the KV cache --------------------------------------------------------------------------------
KVCache::KVCache(Backend& be, int n_layer, int64_t floats, bool shared)
    : be_(&be), n_layer_(n_layer), shared_(shared) {
  reserve(floats);
}

void KVCache::reserve(int64_t floats) {
  if (floats <= floats_) return;
  const int copies = shared_ ? 1 : n_layer_;
  k_ = DeviceBuffer(*be_, size_t(floats) * copies * 4);
  v_ = DeviceBuffer(*be_, size_t(floats) * copies * 4);
  floats_ = floats;
}

void* KVCache::hidden_for(int64_t rows, size_t row_bytes) {
  if (size_t(rows) * row_bytes > hidden_.bytes()) hidden_ = DeviceBuffer(*be_, size_t(rows) * row_bytes);
  hidden_rows_ = rows;
  return hidden_.as<void>();
}

float* KVCache::k(int layer) const { return k_.as<float>() + (shared_ ? 0 : int64_t(layer) * floats_); }
float* KVCache::v(int layer) const { return v_.as<float>() + (shared_ ? 0 : int64_t(layer) * floats_); }

// ---- scratch and the cached block ------------------------------------------------------------------
void GPTImpl::infer_reserve(int64_t N, int T_) {
  const int64_t head_rows = std::max<int64_t>(1, std::min<int64_t>(N, (int64_t(1) << 22) / Vp));
  if (N <= inf.N && T_ <= inf.T && inf.buf.bytes() > 0) return;
  N = std::max(N, inf.N);
  T_ = std::max(T_, inf.T);
  const int64_t hr = std::max(head_rows, inf.head_rows);
  const InferencePlan p = inference_plan(layout, N, T_, hr);
  inf.buf = DeviceBuffer(*be, size_t(p.floats) * 4);
  float* base = inf.buf.as<float>();
  auto at = [base](int64_t off) { return off >= 0 ? base + off : nullptr; };
  auto at_i = [base](int64_t off) { return reinterpret_cast<int32_t*>(base + off); };
  inf.a = bind_block(p.block, base);
  inf.qkv = at(p.qkv), inf.tmp_d = at(p.tmp_d), inf.lnf_rstd = at(p.lnf_rstd), inf.logits = at(p.logits);
  inf.rows_mm = at(p.rows_mm), inf.cos_t = at(p.cos_t), inf.sin_t = at(p.sin_t), inf.loss = at(p.loss);
  inf.x0 = at(p.x0);
  inf.tok = at_i(p.tok), inf.tgt = at_i(p.tgt), inf.argmax = at_i(p.argmax), inf.big = at_i(p.bigram);
  inf.prev = at_i(p.prev);
  be->rope_tables(inf.cos_t, inf.sin_t, T_, hd, cfg.rope_base);
  inf.N = N;
  inf.T = T_;
  inf.head_rows = hr;
}

void GPTImpl::block_cached(int l, int64_t N, const std::vector<KVSegment>& segs, float* kc, float* vc) {
  const LayerOff& lo = block_offs[l];
  LayerAct& a = inf.a;
  float* tmp = inf.tmp_d;
  const int mmb = prec == MatPrec::BF16 ? 2 : 4;
  attn_in(lo, a, inf.qkv, N);
  {
    ProfRegion pr(prof, "attention.cached", "fwd");
    for (const KVSegment& sg : segs) {
      // The fused head stage on the segment's rows (value embedding rows added to v), with RoPE
      // tables shifted to its first position.
      const int64_t rope_off = int64_t(sg.pos0) * (hd / 2);
      be->qkv_heads_fwd({.shape = {.B = 1, .H = H, .Hkv = Hkv, .hd = hd}, .T = sg.n,
                         .norm = {.on = cfg.qk_norm, .qg = pp(lo.qn_g), .kg = pp(lo.kn_g), .eps = cfg.norm_eps},
                         .rope = {.cos_t = inf.cos_t + rope_off, .sin_t = inf.sin_t + rope_off},
                         .qkv = inf.qkv + sg.off * qkvw, .ve = pp(lo.ve), .tok = inf.tok + sg.off,
                         .qraw = a.qraw ? a.qraw + sg.off * qw : nullptr,
                         .kraw = a.kraw ? a.kraw + sg.off * kvw : nullptr,
                         .q_rstd = a.q_rstd ? a.q_rstd + sg.off * H : nullptr,
                         .k_rstd = a.k_rstd ? a.k_rstd + sg.off * Hkv : nullptr, .q = a.q + sg.off * qw,
                         .k = a.k + sg.off * kvw, .v = a.v + sg.off * kvw});
      for (int hh = 0; hh < Hkv; ++hh) {  // keys/values into the cache area at [pos0, pos0 + n)
        const int64_t from = sg.off * kvw + int64_t(hh) * sg.n * hd;
        const int64_t to = sg.cache + (int64_t(hh) * sg.ldT + sg.pos0) * hd;
        be->copy(kc + to, a.k + from, sizeof(float) * sg.n * hd);
        be->copy(vc + to, a.v + from, sizeof(float) * sg.n * hd);
      }
      be->attention_fwd({.shape = {.B = 1, .H = H, .Hkv = Hkv, .hd = hd}, .Tq = sg.n, .Tk = sg.pos0 + sg.n,
                         .Tk_cap = sg.ldT, .window = cfg.attn_window, .prec = prec, .q = a.q + sg.off * qw,
                         .k = kc + sg.cache, .v = vc + sg.cache, .o = a.o + sg.off * qw, .lse = nullptr});
      be->merge_heads({.B = 1, .T = sg.n, .nh = H, .hd = hd, .ld = qw, .y = a.o + sg.off * qw,
                       .x = reinterpret_cast<char*>(a.att_mm) + sg.off * qw * mmb, .out_t = mmt()});
    }
  }
  attn_out_mlp(lo, a, a.x, tmp, N);
}

// ---- the model's inference entry points ------------------------------------------------------------
namespace {
// Refuses segments that leave tokens uncovered or do not fit their cache area.
void check_segments(const GPTImpl& m, int64_t N, const std::vector<KVSegment>& segs, const KVCache& cache,
                    int max_pos) {
  int64_t covered = 0;
  for (const KVSegment& sg : segs) {
    if (sg.n <= 0 || sg.off < 0 || sg.off + sg.n > N || sg.pos0 < 0 || sg.pos0 + sg.n > sg.ldT ||
        sg.pos0 + sg.n > max_pos || sg.cache < 0 || sg.cache + int64_t(m.Hkv) * sg.ldT * m.hd > cache.floats())
      fail("GPT cached forward: a segment of {} tokens at position {} does not fit its cache area", sg.n, sg.pos0);
    if ((m.off_big >= 0 || m.off_smear >= 0) && sg.pos0 > 0 && (sg.prev < 0 || sg.prev >= m.V))
      fail("GPT cached forward: a segment at position {} lacks its previous token (token {}), which the "
           "{} reads", sg.pos0, sg.prev, m.off_big >= 0 ? "bigram embedding" : "token smearing");
    covered += sg.n;
  }
  if (covered != N) fail("GPT cached forward: segments cover {} of {} tokens", covered, N);
}

// Copies the listed rows of `src` (row size `row_bytes`) to consecutive rows of `dst`, on the device.
void gather_rows(Backend& be, const void* src, void* dst, const int64_t* rows, int64_t n, size_t row_bytes) {
  for (int64_t r = 0; r < n; ++r)
    be.copy(static_cast<char*>(dst) + r * row_bytes, static_cast<const char*>(src) + rows[r] * row_bytes, row_bytes);
}
}  // namespace

void GPT::forward_cached(const int32_t* tokens, int64_t N, const std::vector<KVSegment>& segs, KVCache& cache,
                         int max_pos) {
  GPTImpl& m = *impl;
  Backend& be = *m.be;
  m.have_fwd = false;  // nothing is kept for a backward
  if (N <= 0) fail("GPT cached forward: no tokens");
  for (int64_t i = 0; i < N; ++i)
    if (tokens[i] < 0 || tokens[i] >= m.V) fail("GPT cached forward: token id {} out of range [0, {})", tokens[i], m.V);
  check_segments(m, N, segs, cache, max_pos);
  m.infer_reserve(N, max_pos);
  m.refresh_bf16();
  const int mmb = m.prec == MatPrec::BF16 ? 2 : 4;
  const int d = m.d;
  LayerAct& a = m.inf.a;
  be.to_device(m.inf.tok, tokens, sizeof(int32_t) * N);
  std::vector<int32_t> prev(static_cast<size_t>(N));  // each token's previous one (-1: none)
  for (const KVSegment& sg : segs)
    for (int i = 0; i < sg.n; ++i) prev[size_t(sg.off + i)] = i > 0 ? tokens[sg.off + i - 1] : sg.pos0 > 0 ? sg.prev : -1;
  if (m.off_smear >= 0) be.to_device(m.inf.prev, prev.data(), sizeof(int32_t) * N);
  m.embed_fwd(m.inf.tok, m.inf.prev, N, a.x);
  if (m.off_big >= 0) {
    std::vector<int32_t> rows(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) rows[size_t(i)] = bigram_row(prev[size_t(i)], tokens[i], m.cfg.bigram_buckets);
    m.add_bigram(rows, m.inf.big, a.x, m.inf.tmp_d);
  }
  if (m.inf.x0) be.copy(m.inf.x0, a.x, sizeof(float) * N * d);
  for (int l = 0; l < m.L; ++l) {
    if (m.block_offs[l].x0 >= 0) {
      ProfRegion pr(m.prof, "x0_skip", "fwd");
      be.mix2_fwd(a.x, m.inf.x0, m.pp(m.block_offs[l].x0), a.x, N * d);
    }
    m.block_cached(l, N, segs, cache.k(l), cache.v(l));
  }
  ProfRegion pr(m.prof, "rmsnorm.final", "fwd");
  m.norm_to_mm(a.x, m.off_fg, static_cast<float*>(cache.hidden_for(N, size_t(d) * mmb)), m.inf.lnf_rstd, N);
}

void GPT::cached_logits(const KVCache& cache, const int64_t* rows, int64_t n, float* out) {
  GPTImpl& m = *impl;
  const size_t row_bytes = size_t(m.d) * (m.prec == MatPrec::BF16 ? 2 : 4);
  for (int64_t r = 0; r < n; ++r)
    if (rows[r] < 0 || rows[r] >= cache.hidden_rows())
      fail("GPT cached logits: row {} outside the last forward", rows[r]);
  const GPTImpl::HeadPass p{GPTImpl::HeadMode::Logits, {"matmul.head", nullptr, nullptr, nullptr}, m.inf.head_rows,
                            m.inf.logits, 0.0f, out};
  m.head_pass(p, n, [&](int64_t r0, int64_t nr) {
    gather_rows(*m.be, cache.hidden(), m.inf.rows_mm, rows + r0, nr, row_bytes);
    return GPTImpl::HeadChunk{m.inf.rows_mm};
  });
}

void GPT::cached_score(const KVCache& cache, const int32_t* targets, float* loss, int32_t* argmax) {
  GPTImpl& m = *impl;
  Backend& be = *m.be;
  const int64_t N = cache.hidden_rows();
  const size_t row_bytes = size_t(m.d) * (m.prec == MatPrec::BF16 ? 2 : 4);
  std::vector<int64_t> at;  // the rows with a target: the head runs on these only
  for (int64_t i = 0; i < N; ++i) {
    loss[i] = 0.0f;
    argmax[i] = -1;
    if (targets[i] >= m.V) fail("GPT cached score: target id {} out of range [0, {})", targets[i], m.V);
    if (targets[i] >= 0) at.push_back(i);
  }
  std::vector<int32_t> tg(size_t(m.inf.head_rows)), am(tg.size());
  std::vector<float> lo(tg.size());
  const GPTImpl::HeadPass p{GPTImpl::HeadMode::Score, {"matmul.head", "softcap_xent", nullptr, nullptr},
                            m.inf.head_rows, m.inf.logits, 0.0f};
  auto rows = [&](int64_t r0, int64_t nr) {
    gather_rows(be, cache.hidden(), m.inf.rows_mm, at.data() + r0, nr, row_bytes);
    for (int64_t r = 0; r < nr; ++r) tg[size_t(r)] = targets[at[size_t(r0 + r)]];
    be.to_device(m.inf.tgt, tg.data(), sizeof(int32_t) * nr);
    return GPTImpl::HeadChunk{m.inf.rows_mm, m.inf.tgt, m.inf.loss, m.inf.argmax};
  };
  auto done = [&](int64_t r0, int64_t nr) {
    be.to_host(lo.data(), m.inf.loss, sizeof(float) * nr);
    be.to_host(am.data(), m.inf.argmax, sizeof(int32_t) * nr);
    for (int64_t r = 0; r < nr; ++r) {
      loss[at[size_t(r0 + r)]] = lo[size_t(r)];
      argmax[at[size_t(r0 + r)]] = am[size_t(r)];
    }
  };
  m.head_pass(p, int64_t(at.size()), rows, done);
}

}  // namespace clm

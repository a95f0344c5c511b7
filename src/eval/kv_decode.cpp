// KV-cache decoding sessions (see kv_decode.h) over the GPT's one forward: the decoder owns the caches
// and lays out segments (one per row for append(), prefix + branches for score_groups()); the model's
// forward_cached runs the same blocks as training, and its head runs only on the rows asked for.
#include "eval/kv_decode.h"

#include <algorithm>
#include <vector>

#include "core/common.h"
#include "model/gpt.h"

namespace clm {

struct KVDecoderImpl {
  GPT* model = nullptr;
  ModelConfig cfg;
  int max_B = 0, max_T = 0, B = 0, pos = 0, n_last = 0;
  bool one_shot = false;
  int64_t row_floats = 0;  // one row's cache area: Hkv x max_T x hd
  std::unique_ptr<KVCache> rows;   // [max_B row areas] per layer (one_shot: shared by the layers)
  std::unique_ptr<KVCache> group;  // score_groups: one area per group, shared by the layers
  KVCache* last = nullptr;         // the cache holding the last forward's hidden states
  std::vector<int32_t> last_tok;   // each row's last appended token (a bigram embedding reads it)
};

KVDecoder::KVDecoder(GPT& model, int max_B, int max_T, bool one_shot) : impl(std::make_unique<KVDecoderImpl>()) {
  KVDecoderImpl& m = *impl;
  const ModelConfig& c = model.config();
  if (max_B <= 0 || max_T <= 0) fail("KV decoder: batch and length must be positive");
  m.model = &model;
  m.cfg = c;
  m.max_B = max_B;
  m.max_T = max_T;
  m.one_shot = one_shot;
  m.row_floats = int64_t(c.n_kv_head) * max_T * c.head_dim;
  m.rows = std::make_unique<KVCache>(model.backend(), c.n_layer, m.row_floats * max_B, one_shot);
  m.group = std::make_unique<KVCache>(model.backend(), c.n_layer, 0, /*shared_layers=*/true);
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
  std::vector<KVSegment> segs(static_cast<size_t>(B));
  m.last_tok.resize(size_t(m.max_B), -1);
  for (int b = 0; b < B; b++)
    segs[size_t(b)] = {int64_t(b) * n, n, m.pos, int64_t(b) * m.row_floats, m.max_T, m.pos > 0 ? m.last_tok[size_t(b)] : -1};
  m.model->forward_cached(tokens, int64_t(B) * n, segs, *m.rows, m.max_T);
  for (int b = 0; b < B; b++) m.last_tok[size_t(b)] = tokens[int64_t(b) * n + n - 1];
  m.last = m.rows.get();
  m.pos += n;
  m.n_last = n;
}

void KVDecoder::score_groups(const int32_t* tokens, const std::vector<PrefixGroup>& groups,
                             const int32_t* targets, float* loss, int32_t* argmax) {
  KVDecoderImpl& m = *impl;
  // Each group gets its own cache area of (prefix + longest branch) positions. Segments run in
  // packed order, so within a layer the prefix's keys are in place before any branch attends to
  // them, and each branch writes its keys just after the prefix, over the previous branch's.
  std::vector<KVSegment> segs;
  int64_t off = 0, cache = 0;
  const int64_t Hkv = m.cfg.n_kv_head, hd = m.cfg.head_dim;
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
    const int32_t prefix_last = g.prefix > 0 ? tokens[off - 1] : -1;
    for (int n : g.branches) {
      segs.push_back({off, n, g.prefix, cache, ldT, prefix_last});
      off += n;
    }
    cache += Hkv * ldT * hd;
  }
  if (off == 0) fail("KV decoder: no tokens to score");
  m.group->reserve(cache);
  m.model->forward_cached(tokens, off, segs, *m.group, m.max_T);
  m.last = m.group.get();
  m.pos = 0;  // the per-row caches were not touched but no longer match the last forward
  m.B = 0;
  m.n_last = 0;
  m.model->cached_score(*m.group, targets, loss, argmax);
}

void KVDecoder::last_logits(float* out) {
  KVDecoderImpl& m = *impl;
  if (m.n_last == 0) fail("KV decoder: last_logits before append");
  std::vector<int64_t> rows(size_t(m.B));
  for (int b = 0; b < m.B; b++) rows[size_t(b)] = int64_t(b) * m.n_last + m.n_last - 1;
  m.model->cached_logits(*m.rows, rows.data(), m.B, out);
}

void KVDecoder::score(const int32_t* targets, float* loss, int32_t* argmax) {
  KVDecoderImpl& m = *impl;
  if (m.n_last == 0) fail("KV decoder: score before append");
  m.model->cached_score(*m.rows, targets, loss, argmax);
}

}  // namespace clm

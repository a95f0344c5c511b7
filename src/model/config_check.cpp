// The check of a ModelConfig: every model.* key's range, the shapes a GPT can be built with, and
// upper bounds that keep the sizes computed from the shape free of integer overflow.
#include <cmath>
#include <cstdint>

#include "core/common.h"
#include "model/config.h"

namespace clm {

namespace {

void at_most(const char* key, int64_t v, int64_t max) {
  if (v > max) fail("{} is {}, beyond any supported model (at most {})", key, v, max);
}

void check_shape(const ModelConfig& m) {
  at_most("model.n_layer", m.n_layer, 1 << 12);
  at_most("model.d_model", m.d_model, 1 << 17);
  at_most("model.head_dim", m.head_dim, 1 << 14);
  at_most("model.vocab_size", m.vocab_size, 1 << 24);
  at_most("model.seq_len", m.seq_len, 1 << 22);
  if (m.n_layer <= 0) fail("model.n_layer must be >= 1, got {}", m.n_layer);
  if (m.d_model <= 0) fail("model.d_model must be >= 1, got {}", m.d_model);
  if (m.n_head <= 0) fail("model.n_head must be >= 1, got {}", m.n_head);
  if (m.n_kv_head <= 0) fail("model.n_kv_head must be >= 1, got {}", m.n_kv_head);
  if (m.d_model % m.n_head != 0)
    fail("model.d_model ({}) is not divisible by model.n_head ({})", m.d_model, m.n_head);
  if (m.n_head % m.n_kv_head != 0)
    fail("model.n_head ({}) is not divisible by model.n_kv_head ({})", m.n_head, m.n_kv_head);
  if (m.head_dim <= 0 || m.head_dim % 2 != 0)
    fail("model.head_dim must be a positive even number (RoPE rotates pairs), got {}", m.head_dim);
  if (!(m.mlp_ratio > 0) || m.mlp_ratio > 64) fail("model.mlp_ratio must be in (0, 64], got {}", m.mlp_ratio);
  if (m.activation != "relu2" && m.activation != "gelu" && m.activation != "swiglu")
    fail("model.activation '{}' is unknown (relu2, gelu, swiglu)", m.activation);
}

void check_features(const ModelConfig& m) {
  if (!(m.norm_eps > 0)) fail("model.norm_eps must be > 0, got {}", m.norm_eps);
  if (!(m.rope_base > 0)) fail("model.rope_base must be > 0, got {}", m.rope_base);
  if (!(m.logit_softcap >= 0)) fail("model.logit_softcap must be >= 0 (0 = off), got {}", m.logit_softcap);
  if (m.bigram_buckets < 0 || m.bigram_buckets == 1)
    fail("model.bigram_buckets must be 0 (off) or >= 2, got {}", m.bigram_buckets);
  at_most("model.bigram_buckets", m.bigram_buckets, 1 << 24);
  if (m.attn_window < 0) fail("model.attn_window must be >= 0 (0 = full attention), got {}", m.attn_window);
  if (m.value_embeds < 0 || m.value_embeds > m.n_layer)
    fail("model.value_embeds must be in [0, n_layer = {}], got {}", m.n_layer, m.value_embeds);
  if (!(m.mtp_weight >= 0) || !std::isfinite(m.mtp_weight))
    fail("model.mtp_weight must be a finite number >= 0 (0 = off), got {}", m.mtp_weight);
  if (m.vocab_size < 0) fail("model.vocab_size must be >= 0 (0 = from the tokenizer), got {}", m.vocab_size);
  if (m.seq_len <= 0) fail("model.seq_len must be >= 1, got {}", m.seq_len);
  if (!(m.init_std >= 0)) fail("model.init_std must be >= 0, got {}", m.init_std);
  const std::string& p = m.matmul_precision;
  if (p != "auto" && p != "bf16" && p != "fp32") fail("model.matmul_precision '{}' is unknown (auto, bf16, fp32)", p);
}

}  // namespace

void validate(const ModelConfig& m) {
  check_shape(m);
  check_features(m);
}

}  // namespace clm

// Derived shapes of a ModelConfig that the model code needs (kept apart from config parsing).
#include <algorithm>
#include <cmath>

#include "model/config.h"

namespace clm {

// mlp_ratio*d_model rounded up to a multiple of 64 (at least 64). SwiGLU has three matrices instead
// of two, so it uses 2/3 of that width (again rounded up to 64) to keep parameters comparable.
int ModelConfig::mlp_hidden() const {
  auto up64 = [](double h) { return std::max(64, int(std::ceil(h / 64.0 - 1e-9)) * 64); };
  int h = up64(double(mlp_ratio) * d_model);
  if (activation == "swiglu") h = up64(h * 2.0 / 3.0);
  return h;
}

ParamCount count_params(const ModelConfig& m) {
  ParamCount p;
  int64_t V = m.padded_vocab(), D = m.d_model, H = m.n_head, KV = m.n_kv_head, hd = m.head_dim;
  // Hidden width rule of ModelConfig::mlp_hidden() (model/config_shape.cpp): mlp_ratio*d_model rounded
  // up to a multiple of 64; SwiGLU takes 2/3 of that, rounded up to 64 again.
  auto up64 = [](double h) { return std::max<int64_t>(64, int64_t(std::ceil(h / 64.0 - 1e-9)) * 64); };
  int64_t hidden = up64(double(m.mlp_ratio) * D);
  if (m.activation == "swiglu") hidden = up64(double(hidden) * 2.0 / 3.0);
  p.embed = V * D + int64_t(m.bigram_buckets) * D + int64_t(m.value_embeds) * V * KV * hd;
  p.head = m.tie_embeddings ? 0 : V * D;
  int64_t attn = D * H * hd + 2 * D * KV * hd + H * hd * D;  // wq, wk, wv, wo
  int64_t mlp = (m.activation == "swiglu" ? 3 : 2) * D * hidden;
  p.matrix = int64_t(m.n_layer) * (attn + mlp) + (m.mtp_weight > 0 ? D * D : 0);  // + mtp_proj
  // Learned gains: two norms per block (+ q/k norms with qk_norm) and the final norm.
  if (m.norm_gain) p.scalar = int64_t(m.n_layer) * (2 * D + (m.qk_norm ? 2 * hd : 0)) + D;
  if (m.x0_skips) p.scalar += 2 * int64_t(std::max(m.n_layer - 1, 0));  // (a, b) per block after the first
  return p;
}

double mean_attended_keys(int T, int window) {
  if (T <= 0) return 0;
  if (window <= 0 || window >= T) return (double(T) + 1.0) / 2.0;
  // positions 0..W-1 see p + 1 keys, the remaining T - W see W each
  const double W = window;
  return (W * (W + 1.0) / 2.0 + (double(T) - W) * W) / double(T);
}

double flops_per_token(const ModelConfig& m, int T) {
  ParamCount p = count_params(m);
  // The head (tied or not) is a matmul; multi-token prediction runs it a second time in training.
  double mm = double(p.matrix) + double(m.padded_vocab()) * m.d_model * (m.mtp_weight > 0 ? 2 : 1);
  double att = double(m.n_layer) * 4.0 * m.n_head * m.head_dim * mean_attended_keys(T, m.attn_window);
  return 3.0 * (2.0 * mm + att);
}

}  // namespace clm

// Writing a clocklm model as transformers' `nanochat` (see hf_nanochat.h and docs/FORMATS.md).
//
// What differs between the two and how each difference is carried over exactly:
// * RoPE: nanochat rotates each (x_i, x_{i+hd/2}) pair by -angle (its rotate_half is
//   cat(x2, -x1)), clocklm by +angle. With P negating the second half of a head,
//   R(-a) P = P R(a), so the rows of wq and wk that make the second half of every head are
//   negated: nanochat's rotated q and k are then P times clocklm's, and P cancels in q.k.
// * QK-norm: nanochat normalises after RoPE, clocklm before; without gains RMSNorm commutes with
//   any rotation and with P, so both compute the same.
// * Embedding norm: nanochat applies RMSNorm to the embedding output, clocklm does not, and a
//   norm's output always has RMS < 1 while trained embedding rows often have more. So nanochat's
//   residual stream is made alpha times clocklm's, alpha = 2^-k small enough that alpha e has RMS
//   < 1 for every row e: each row is stored as c e with c = alpha^2 sqrt(eps / (1 - alpha^2 m))
//   (m its mean square), whose RMSNorm with eps' = alpha^2 eps is alpha e; wo and w_out (the
//   residual branches' outputs) and wq and wk are multiplied by alpha; nanochat's one norm eps is
//   eps'. Every RMSNorm then sees alpha times clocklm's input with alpha^2 times its eps, which is
//   the same function, and powers of two scale floats exactly. The head needs its own copy of
//   the table, so tied embeddings are written untied.
// * Vocabulary: clocklm pads its tables to a multiple of 64 rows and masks the padded logits to
//   -inf; nanochat has no mask, so only the first vocab_size rows are written and vocab_size is
//   the true vocabulary.
#include "export/hf_nanochat.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/ranges.h>

#include "core/common.h"
#include "export/clocklm_format.h"
#include "tok/hf_json.h"

namespace clm {

std::vector<std::string> hf_nanochat_refusals(const ModelConfig& m) {
  std::vector<std::string> r;
  if (m.value_embeds > 0) r.push_back(fmt::format("model.value_embeds={} (value embeddings)", m.value_embeds));
  if (m.x0_skips) r.push_back("model.x0_skips (embedding skips)");
  if (m.smear) r.push_back("model.smear (token smearing)");
  if (m.bigram_buckets > 0) r.push_back(fmt::format("model.bigram_buckets={} (bigram embedding)", m.bigram_buckets));
  if (m.attn_window > 0) r.push_back(fmt::format("model.attn_window={} (sliding-window attention)", m.attn_window));
  if (m.activation != "relu2")
    r.push_back(fmt::format("model.activation={} (nanochat's MLP is relu2, ungated)", m.activation));
  if (m.norm_gain) r.push_back("model.norm_gain (learned norm gains; nanochat's norms have none)");
  if (!m.qk_norm) r.push_back("model.qk_norm=false (nanochat always normalises q and k)");
  if (m.n_head * m.head_dim != m.d_model)
    r.push_back(fmt::format("model.head_dim={} (nanochat's head_dim is d_model/n_head = {})", m.head_dim,
                            double(m.d_model) / m.n_head));
  return r;
}

namespace {

// Rows [0, rows) of a [R, C] table.
SafeTensor first_rows(const SafeTensor& t, const std::string& name, int64_t rows) {
  const int64_t C = t.shape.at(1);
  return {name, {rows, C}, std::vector<float>(t.data.begin(), t.data.begin() + rows * C)};
}

// wq or wk ([heads*hd, d]) with the rows of the second half of every head negated.
SafeTensor rope_sign(const SafeTensor& t, const std::string& name, int hd) {
  SafeTensor o{name, t.shape, t.data};
  const int64_t d = t.shape.at(1), rows = t.shape.at(0);
  for (int64_t r = 0; r < rows; ++r)
    if (r % hd >= hd / 2)
      for (int64_t c = 0; c < d; ++c) o.data[size_t(r * d + c)] = -o.data[size_t(r * d + c)];
  return o;
}

// Mean square of each of the first `rows` rows of a [R, d] table, in double.
std::vector<double> row_mean_squares(const SafeTensor& t, int64_t rows) {
  const int64_t d = t.shape.at(1);
  std::vector<double> ms(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < d; ++c) ss += double(t.data[size_t(r * d + c)]) * t.data[size_t(r * d + c)];
    ms[size_t(r)] = ss / double(d);
  }
  return ms;
}

void scale(SafeTensor& t, double alpha) {
  for (float& v : t.data) v = float(double(v) * alpha);
}

}  // namespace

HfNanochat hf_nanochat_model(const ExportSource& src) {
  const ModelConfig& m = src.cfg.model;
  const int64_t V = m.vocab_size;
  HfNanochat hf;
  SafeTensor emb = first_rows(src.param("wte"), "model.embed_tokens.weight", V);
  const std::vector<double> ms = row_mean_squares(emb, V);
  double max_ms = 0;
  for (double x : ms) {
    if (!std::isfinite(x)) fail("export: checkpoint {} has a non-finite embedding row", src.checkpoint);
    max_ms = std::max(max_ms, x);
  }
  while (std::ldexp(max_ms, -2 * hf.residual_shift) > 0.5) ++hf.residual_shift;  // alpha^2 m <= 1/2
  const double alpha = std::ldexp(1.0, -hf.residual_shift);
  hf.rms_norm_eps = float(std::ldexp(double(m.norm_eps), -2 * hf.residual_shift));
  const int64_t d = m.d_model;
  for (int64_t r = 0; r < V; ++r) {
    const double c = alpha * alpha * std::sqrt(double(m.norm_eps) / (1.0 - alpha * alpha * ms[size_t(r)]));
    for (int64_t k = 0; k < d; ++k) emb.data[size_t(r * d + k)] = float(double(emb.data[size_t(r * d + k)]) * c);
  }
  hf.tensors.push_back(std::move(emb));
  for (int i = 0; i < m.n_layer; ++i) {
    const std::string c = fmt::format("blocks.{}.", i), h = fmt::format("model.layers.{}.", i);
    SafeTensor q = rope_sign(src.param(c + "attn.wq"), h + "self_attn.q_proj.weight", m.head_dim);
    SafeTensor k = rope_sign(src.param(c + "attn.wk"), h + "self_attn.k_proj.weight", m.head_dim);
    SafeTensor v = src.param(c + "attn.wv"), o = src.param(c + "attn.wo");
    SafeTensor up = src.param(c + "mlp.w_in"), down = src.param(c + "mlp.w_out");
    v.name = h + "self_attn.v_proj.weight";
    o.name = h + "self_attn.o_proj.weight";
    up.name = h + "mlp.fc1.weight";
    down.name = h + "mlp.fc2.weight";
    for (SafeTensor* t : {&q, &k, &o, &down}) scale(*t, alpha);
    for (SafeTensor* t : {&q, &k, &v, &o, &up, &down}) hf.tensors.push_back(std::move(*t));
  }
  hf.tensors.push_back(first_rows(src.param(m.tie_embeddings ? "wte" : "lm_head"), "lm_head.weight", V));
  return hf;
}

nlohmann::json hf_nanochat_config(const ModelConfig& m, float rms_norm_eps, int bos_id, SafeDType dt) {
  const nlohmann::json theta = json_float(m.rope_base);
  const char* torch_dtype = dt == SafeDType::F32 ? "float32" : "bfloat16";
  return {{"architectures", {"NanoChatForCausalLM"}},
          {"model_type", "nanochat"},
          {"vocab_size", m.vocab_size},
          {"hidden_size", m.d_model},
          {"intermediate_size", m.mlp_hidden()},
          {"num_hidden_layers", m.n_layer},
          {"num_attention_heads", m.n_head},
          {"num_key_value_heads", m.n_kv_head},
          {"max_position_embeddings", m.seq_len},
          {"hidden_act", "relu2"},
          {"attention_dropout", 0.0},
          {"attention_bias", false},
          {"rms_norm_eps", json_float(rms_norm_eps)},
          {"initializer_range", json_float(m.init_std)},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", theta}}},
          {"rope_theta", theta},
          {"final_logit_softcapping", m.logit_softcap > 0 ? json_float(m.logit_softcap) : nlohmann::json()},
          {"tie_word_embeddings", false},
          {"use_cache", true},
          {"bos_token_id", bos_id},
          {"eos_token_id", bos_id},
          {"pad_token_id", bos_id},
          {"torch_dtype", torch_dtype},
          {"dtype", torch_dtype}};
}

nlohmann::json hf_generation_config(int bos_id) {
  return {{"bos_token_id", bos_id}, {"eos_token_id", bos_id}, {"pad_token_id", bos_id}};
}

void write_hf_nanochat(const ExportSource& src, const std::string& dir, SafeDType dt) {
  namespace fs = std::filesystem;
  const std::vector<std::string> refused = hf_nanochat_refusals(src.cfg.model);
  if (!refused.empty())
    fail("export: the hf format (transformers' nanochat) cannot represent this run's model: {} (use --format "
         "safetensors)", fmt::join(refused, "; "));
  if (!src.tokenizer) fail("export: the hf format needs the run's tokenizer (pass --tokenizer or --data)");
  const int bos = int(src.tokenizer->bos_id());
  const HfNanochat hf = hf_nanochat_model(src);
  write_safetensors((fs::path(dir) / "model.safetensors").string(), hf.tensors, dt,
                    export_safetensors_metadata(src, "hf-nanochat"));
  write_json_file(dir, "config.json", hf_nanochat_config(src.cfg.model, hf.rms_norm_eps, bos, dt));
  write_json_file(dir, "generation_config.json", hf_generation_config(bos));
  write_json_file(dir, "clocklm_config.json", export_config_json(src, dt));
  src.tokenizer->save((fs::path(dir) / "clocklm_tokenizer.json").string());
  write_hf_tokenizer(*src.tokenizer, dir);  // tokenizer.json + tokenizer_config.json
}

}  // namespace clm

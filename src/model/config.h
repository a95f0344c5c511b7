// Model shape: the ModelConfig a GPT is built from, its check, and its parameter and FLOP counts
// (computed from its layout, model/layout.h, without allocating). Run-level settings (optimizer,
// training loop) live above it, in optim/optim_config.h and config/config.h.
#pragma once
#include <cstdint>
#include <string>

namespace clm {

struct ModelConfig {
  int n_layer = 8;
  int d_model = 512;
  int n_head = 8;
  int n_kv_head = 8;          // < n_head: grouped-query attention; 1: multi-query
  int head_dim = 64;          // n_head*head_dim need not equal d_model
  float mlp_ratio = 4.0f;     // hidden = mlp_ratio * d_model (rounded to a multiple of 64)
  std::string activation = "relu2";  // relu2 | gelu | swiglu
  float norm_eps = 1e-6f;     // RMSNorm epsilon (norms carry no learned gain unless norm_gain)
  bool norm_gain = false;
  float rope_base = 10000.0f;
  bool qk_norm = true;
  bool tie_embeddings = false;
  float logit_softcap = 15.0f;  // 0 = off; logits = c*tanh(z/c)
  // > 0: a second input embedding of this many rows, indexed by a hash of (previous token, token)
  // and added to the token embedding, so the first layer sees the bigram at once (row
  // bigram_buckets-1 stands for "no previous token", at each row's first position). 0 = off.
  int bigram_buckets = 0;
  // The last value_embeds blocks each have a token embedding of width n_kv_head*head_dim that is
  // added to the attention values (value embeddings: each token's identity reaches the values
  // directly, a few embedding-table rows per token instead of matmul work). 0 = off.
  int value_embeds = 0;
  // > 0: sliding-window attention, each query sees only the attn_window most recent positions (its
  // own included) in every block; attention then costs O(T * window) instead of O(T^2). 0 = full.
  int attn_window = 0;
  // Embedding skips: every block after the first takes a learned mix of its input and the
  // embedding output x0, x <- a x + b x0 (one pair per block, starting at (1, 0), so the model
  // begins as the one without), and so the token identity stays in reach of deep blocks.
  bool x0_skips = false;
  // > 0: multi-token prediction as an auxiliary training loss. A second head predicts the token
  // after next from the final-norm output through one d x d projection (parameter mtp_proj, then
  // an RMSNorm) and the shared LM head; training minimises next-token loss + mtp_weight x that
  // loss. Evaluation and inference use the next-token head only. 0 = off.
  float mtp_weight = 0.0f;
  // Token smearing: each position's embedding takes in its predecessor's, x[t] = e[t] + lam
  // sigmoid(g . e[t][:k]) e[t-1] within a row (k = smear_gate_width(d_model); parameter `smear`
  // = [lam, g], starting at zero, so the model begins as the one without). The previous token's
  // identity then reaches the first block at the cost of one more table row read per token.
  bool smear = false;
  int vocab_size = 0;         // 0 = take it from the dataset's tokenizer
  int seq_len = 1024;
  float init_std = 0.02f;     // embeddings; hidden matrices use init_std, output projections scaled
  bool zero_init_out = true;  // zero-init attention/MLP output projections and the LM head
  // Matmul inputs: auto (bf16 where the device multiplies bf16 natively, else fp32) | bf16 | fp32.
  // Accumulation is fp32 either way; the resolved value is recorded in run.json and summary.json.
  std::string matmul_precision = "auto";
  int padded_vocab() const { return (vocab_size + 63) / 64 * 64; }
  // Channels of a token's embedding the smear gate reads (model.smear): the first 12, or all of a
  // narrower model.
  int smear_gate_width() const { return d_model < 12 ? d_model : 12; }
  int mlp_hidden() const;
};

// Throws Error naming the first model.* key whose value no GPT can be built with (shapes, ranges,
// names, and bounds that keep every size computed from the shape free of integer overflow). The
// one check of a model config: validate(RunConfig) and the GPT constructor both call it.
void validate(const ModelConfig& m);

// Parameter counts by optimizer group, read off the model's layout (model/layout.h; no allocation).
struct ParamCount {
  int64_t embed = 0, head = 0, matrix = 0, scalar = 0;
  int64_t total() const { return embed + head + matrix + scalar; }
};
ParamCount count_params(const ModelConfig& m);
// Training FLOPs per token (forward + backward = 3x forward) at sequence length T, from the layout:
// 2 per matmul weight (head included, embedding lookup not) plus causal attention,
// 4*n_head*head_dim*mean_attended_keys per layer. GPT::flops_per_token returns the same.
double flops_per_token(const ModelConfig& m, int T);
// Keys a query attends to, averaged over the T positions of a row: (T + 1) / 2 for full causal
// attention, fewer with a window (model.attn_window).
double mean_attended_keys(int T, int window);

}  // namespace clm

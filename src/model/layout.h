// The layout of a GPT computed from its ModelConfig alone, on the host: the parameter table with the
// float offsets at which the fp32 weights, their gradients and the bf16 mirror are carved, each
// block's parameter offsets, the activation arena for max_B x max_T tokens, the bytes all of it
// takes, parameter counts and training FLOPs per token. GPT carves its buffers from it; the CLI,
// the planner and the memory checks read its numbers without allocating a model.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace clm {

enum class ParamKind { Matrix, Embedding, Head, Scalar };  // routes each tensor to an optimizer group

// Every carved view starts on a 16-float (64-byte) boundary.
constexpr int64_t kLayoutAlign = 16;
inline int64_t align16(int64_t n) { return (n + kLayoutAlign - 1) / kLayoutAlign * kLayoutAlign; }

// The row stride (floats) of the LM head's logits and their gradient, Vp columns used: the least
// odd multiple of 16 floats from Vp up. A row of Vp = 8192 floats is 32 KiB, and the rows a matmul
// reads down a column then all fall in one set of the CPU's caches; at an odd number of 64-byte
// lines they spread over every set (the head's weight gradient, 8192 x 192 from 4096 rows: 190 ->
// 90 ms on an AVX2 EPYC, bench/RESULTS.md).
int64_t logits_row_stride(int64_t Vp);

// One parameter tensor: where it sits in the parameter buffer (floats from its start).
struct ParamSlot {
  std::string name;            // e.g. "blocks.3.attn.wq"
  std::vector<int64_t> shape;  // row-major
  ParamKind kind;
  int64_t offset = 0;
  int64_t numel() const;
};

// Parameter offsets of one block (-1 = absent). wq|wk|wv start at wqkv and w_in|w_gate at w_in,
// back to back, so each group is one matmul.
struct LayerOff {
  int64_t attn_g = -1, wqkv = -1, qn_g = -1, kn_g = -1, wo = -1, mlp_g = -1, w_in = -1, w_out = -1;
  int64_t ve = -1;  // value embedding [Vp, kv width] (model.value_embeds)
  int64_t x0 = -1;  // embedding-skip weights (a, b) of the block input a x + b x0 (model.x0_skips)
};

// Activation offsets of one training block in the arena (floats from its start; -1 = absent).
// Shapes for N = max_B * max_T rows; the field comments of GPT's LayerAct say what each holds.
struct BlockActs {
  int64_t x = -1, xpre = -1, mid = -1, ln1_rstd = -1, ln1_mm = -1, qraw = -1, kraw = -1, q_rstd = -1,
          k_rstd = -1, q = -1, k = -1, v = -1, o = -1, lse = -1, att_mm = -1, ln2_rstd = -1, ln2_mm = -1,
          h = -1, act_mm = -1;
};

// The activation arena of a training model for max_B x max_T tokens: everything backward needs per
// block, then scratch shared by all blocks, then the multi-token head's buffers; and the io arrays
// (tokens, targets, argmax, loss, bigram rows, the multi-token targets and the previous tokens of
// token smearing) of `rows` entries each.
struct ActivationPlan {
  struct View {
    std::string name;  // e.g. "blocks.2.q", "logits"
    int64_t offset = 0, floats = 0;  // floats rounded up to the alignment
  };
  int64_t rows = 0;        // max_B * max_T
  int64_t chunk_rows = 0;  // rows of one LM-head chunk (2^25 logits at most, with Vp columns)
  int64_t logits_ld = 0;   // the row stride of the head's logits and their gradient: logits_row_stride(Vp)
  std::vector<BlockActs> blocks;
  int64_t dx0 = -1, x_final = -1, lnf_rstd = -1, lnf_mm = -1, dxf = -1, head_dw = -1, logits = -1,
          logits_mm = -1, tmp_d = -1, tmp_mm = -1, qkv = -1, dres = -1, dtmp = -1, dtmp2 = -1, dmm = -1,
          dq = -1, dk = -1, dv = -1, cos_t = -1, sin_t = -1;
  int64_t mtp_u = -1, mtp_un = -1, mtp_rstd = -1, mtp_dw = -1;  // model.mtp_weight > 0
  std::vector<View> views;  // every view above, in arena order
  int64_t floats = 0;       // arena size
  int io_arrays = 0;        // 4-byte arrays of align16(rows) entries each
  int64_t io_stride = 0;    // align16(rows)
};

struct ModelLayout {
  ModelConfig cfg;
  int max_B = 0, max_T = 0;
  // d_model, heads, kv heads, head dim, MLP hidden, vocab (real, padded), layers, q width, kv width,
  // fused qkv width and MLP up-projection width (2 x hidden with SwiGLU).
  int d = 0, H = 0, Hkv = 0, hd = 0, Hd = 0, V = 0, Vp = 0, L = 0, qw = 0, kvw = 0, qkvw = 0, hw = 0;

  std::vector<ParamSlot> params;  // in buffer order
  std::vector<LayerOff> layers;
  int64_t wte = 0, head = 0;  // head == wte when tied
  int64_t bigram = -1;        // [bigram_buckets, d] (model.bigram_buckets > 0)
  int64_t final_gain = -1;    // [d] (model.norm_gain)
  int64_t mtp = -1;           // mtp_proj [d, d] (model.mtp_weight > 0)
  int64_t smear = -1;         // [1 + smear_gate_width] = lam, gate weights (model.smear)
  int64_t param_floats = 0;   // size of the parameter (and gradient, and bf16 mirror) buffer, gaps included
  ParamCount counts;          // elements by group (gaps excluded)

  ActivationPlan act;  // empty unless max_B and max_T are positive
  // Device bytes of a GPT on this layout: fp32 params + fp32 grads + bf16 mirror + arena + io.
  size_t bytes = 0;

  int64_t num_params() const { return counts.total(); }
  // Training FLOPs (forward + backward = 3x forward) per token at row length T: 2 per matmul weight
  // (the head included, twice with the multi-token head; the embedding lookups not) plus causal
  // attention, 4 * n_head * head_dim * mean_attended_keys(T, attn_window) per block.
  double flops_per_token(int T) const;
};

// Scratch of the cached (inference) forward for N rows at positions below T, in floats from its
// start: one block's activations that every layer reuses (no backward follows, so no log-sum-exp),
// the fused q/k/v rows, a temporary as wide as any row, the LM head's `head_rows` rows of logits and
// inputs, RoPE tables, per-row losses, the embedding output (model.x0_skips) and five int32 io
// arrays (tokens, targets, argmax, bigram rows, previous tokens) of N entries.
struct InferencePlan {
  BlockActs block;
  int64_t qkv = -1, tmp_d = -1, lnf_rstd = -1, logits = -1, rows_mm = -1, cos_t = -1, sin_t = -1, loss = -1,
          x0 = -1, tok = -1, tgt = -1, argmax = -1, bigram = -1, prev = -1;
  int64_t rows = 0, head_rows = 0;
  int T = 0;
  int64_t floats = 0;
};
InferencePlan inference_plan(const ModelLayout& l, int64_t N, int T, int64_t head_rows);

// The layout of `cfg` (a validated config, validate(ModelConfig)); with max_B, max_T > 0 also its
// activation plan and byte total for that many tokens.
ModelLayout model_layout(const ModelConfig& cfg, int max_B = 0, int max_T = 0);

}  // namespace clm

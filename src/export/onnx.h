// ONNX export of a GPT: model.onnx (opset 17, IR version 8) that maps input_ids int64 [batch, seq]
// to logits float [batch, seq, vocab_size] with the math of the model's forward in fp32, every
// architecture option (GQA, value and bigram embeddings, sliding window, embedding skips, relu2 /
// gelu / swiglu, norm gains, qk-norm, tied embeddings, softcap) written with standard ONNX ops.
// The layout of the graph is in docs/FORMATS.md.
#pragma once
#include <string>

#include "export/safetensors.h"
#include "model/gpt.h"

namespace clm {

// The serialised ModelProto of the model `cfg` with the fp32 host parameters `params` (clocklm's
// names and shapes, as GPT::params() lists them). Rows may be up to `max_positions` tokens long
// (the RoPE tables hold that many positions; 0 = the model's seq_len). The vocabulary is the
// config's vocab_size (the tokenizer's; the padding rows of the embedding and head are left out).
// Refuses, in one line, a model whose weights do not fit one protobuf message (2 GiB).
// with_past: the generation variant, which also takes each layer's past keys and values
// (past.{l}.key|value [batch, n_kv_head, past, head_dim]; with a bigram table also prev_ids
// [batch, 1], the token before input_ids[:, 0]), puts the new tokens at positions past.., and
// returns the grown caches (present.{l}.key|value [batch, n_kv_head, past + seq, head_dim]).
std::string onnx_model_bytes(const ModelConfig& cfg, const std::vector<SafeTensor>& params, int max_positions = 0,
                             bool with_past = false);
// onnx_model_bytes written to `path` atomically (temp file + rename).
void write_onnx(const ModelConfig& cfg, const std::vector<SafeTensor>& params, const std::string& path,
                int max_positions = 0, bool with_past = false);
// The same from a model's current weights.
void write_onnx(GPT& model, const std::string& path, int max_positions = 0, bool with_past = false);

}  // namespace clm

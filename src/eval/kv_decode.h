// Decoding sessions with a KV cache over the GPT's forward (GPT::forward_cached). Two uses: generation (the prompt is appended once, then one token per
// step attends to the cached keys/values instead of recomputing the prefix), and cheap scoring (CORE):
// the LM head is applied only at positions that are scored, not at every position of every row;
// and rows that begin with the same tokens (the choices of a multiple-choice item) compute those
// tokens once (score_groups).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.h"

namespace clm {

struct GPT;
struct KVDecoderImpl;

// Rows that share their first `prefix` tokens: row j is prefix + branch j (branches[j] tokens).
struct PrefixGroup {
  int prefix = 0;
  std::vector<int> branches;
};

struct KVDecoder {
  // Uses the model's weights as they are at each call (no copy); the model must outlive it.
  // Caches hold max_B rows of max_T positions on the model's device (max_T <= seq_len is not
  // required, but RoPE tables and the caches are sized by it).
  // one_shot: all layers share one K/V buffer (L times less memory); only a single append() per
  // reset() is then allowed — the scoring use, where rows are processed whole.
  KVDecoder(GPT& model, int max_B, int max_T, bool one_shot = false);
  ~KVDecoder();
  KVDecoder(KVDecoder&&) noexcept;

  void reset();          // forget all cached positions
  int pos() const;       // positions cached so far (the same for every row)
  // Appends n tokens to each of B rows (row b's tokens at tokens[b*n .. b*n+n)); B must stay the same
  // between resets. Keeps the final-norm hidden states of these n positions for the calls below.
  void append(const int32_t* tokens, int B, int n);
  // Softcapped logits of the last appended position of each row: out[B * padded_vocab], padding -inf.
  void last_logits(float* out);
  // For the last append's positions (B*n, row-major): loss (nats) and argmax where targets >= 0
  // (0 / -1 elsewhere). The head matmul runs only on those positions.
  void score(const int32_t* targets, float* loss, int32_t* argmax);
  // Scores groups of rows that share a prefix without the per-row caches: tokens are packed group by
  // group (prefix, then each branch), and targets/loss/argmax are per packed token as in score().
  // Each prefix runs once; branch token i sits at position prefix + i and attends to the prefix's
  // keys and its own branch, so every row gets the computation it would get scored whole.
  // prefix + longest branch must fit max_T. Forgets any cached positions (like reset()).
  void score_groups(const int32_t* tokens, const std::vector<PrefixGroup>& groups,
                    const int32_t* targets, float* loss, int32_t* argmax);

  const ModelConfig& config() const;
  std::unique_ptr<KVDecoderImpl> impl;
};

}  // namespace clm

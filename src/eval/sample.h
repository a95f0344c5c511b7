// Text generation: choosing the next token from logits (temperature, top-k, seeded), and the
// generation loops over a KV-cache decoder (kv_decode.h) or, as a reference, over full forwards.
#pragma once
#include <cstdint>
#include <vector>

#include "core/common.h"

namespace clm {

struct GPT;

struct SampleOptions {
  int tokens = 100;          // new tokens to generate
  float temperature = 1.0f;  // 0 = greedy (argmax)
  int top_k = 0;             // 0 = the whole vocabulary
  uint64_t seed = 42;
  bool stop_at_bos = false;  // stop when the model emits BOS (end of document)
};

// Refuses options generation cannot honour: a negative token count or top_k, a temperature that is
// negative or not finite. The CLI and the MCP tool call it before loading the model.
void check_sample_options(const SampleOptions& opt);

// The next token from logits over the real vocabulary [0, V). temperature 0 -> argmax (first on
// ties); otherwise softmax(logits / temperature) restricted to the top_k largest, sampled with
// one rng.uniform() draw. Deterministic for a given rng state. A logit that is not finite is
// refused (require_finite_output), as eval bpb refuses such a loss.
int32_t sample_token(const float* logits, int V, float temperature, int top_k, Rng& rng);

// Generates with the KV cache: the prompt is processed once, then one token per step.
std::vector<int32_t> generate(GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                              uint32_t bos = 0);
// Reference without a cache: recomputes the whole sequence each step with GPT::last_logits.
std::vector<int32_t> generate_nocache(GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                                      uint32_t bos = 0);

}  // namespace clm

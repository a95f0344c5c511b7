// Generation loops: with the KV cache (the product path) and by full recomputation (the reference
// the tests compare against).
#include <algorithm>

#include "core/common.h"
#include "eval/kv_decode.h"
#include "eval/sample.h"
#include "model/gpt.h"

namespace clm {

namespace {
void check_lengths(const GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opt) {
  if (prompt.empty()) fail("sample: empty prompt");
  check_sample_options(opt);
  int64_t need = (int64_t)prompt.size() + opt.tokens;
  if (need > model.config().seq_len)
    fail("sample: prompt ({} tokens) + {} new tokens exceed the model's context of {}", prompt.size(), opt.tokens,
         model.config().seq_len);
}
}  // namespace

std::vector<int32_t> generate(GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opt, uint32_t bos) {
  check_lengths(model, prompt, opt);
  std::vector<int32_t> out;
  if (opt.tokens == 0) return out;
  const ModelConfig& c = model.config();
  KVDecoder dec(model, 1, (int)prompt.size() + opt.tokens);
  Rng rng(opt.seed);
  std::vector<float> logits(c.padded_vocab());
  dec.append(prompt.data(), 1, (int)prompt.size());  // the prefix is computed once
  for (int i = 0; i < opt.tokens; i++) {
    dec.last_logits(logits.data());
    int32_t tok = sample_token(logits.data(), c.vocab_size, opt.temperature, opt.top_k, rng);
    out.push_back(tok);
    if (opt.stop_at_bos && (uint32_t)tok == bos) break;
    if (i + 1 < opt.tokens) dec.append(&tok, 1, 1);  // one new position attends to the cache
  }
  return out;
}

std::vector<int32_t> generate_nocache(GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                                      uint32_t bos) {
  check_lengths(model, prompt, opt);
  const ModelConfig& c = model.config();
  Rng rng(opt.seed);
  std::vector<float> logits(c.padded_vocab());
  std::vector<int32_t> seq = prompt, out;
  for (int i = 0; i < opt.tokens; i++) {
    model.last_logits(seq.data(), 1, (int)seq.size(), logits.data());
    int32_t tok = sample_token(logits.data(), c.vocab_size, opt.temperature, opt.top_k, rng);
    out.push_back(tok);
    seq.push_back(tok);
    if (opt.stop_at_bos && (uint32_t)tok == bos) break;
  }
  return out;
}

}  // namespace clm

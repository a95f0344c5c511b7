// eval_core for a GPT and a Tokenizer: the tokenizer's batch encoder, rows cropped to the model's
// seq_len, and as the scorer the inference-only forward of kv_decode.h, which applies the LM head
// only at scored positions (a few per row) instead of at every position like GPT::forward. It
// allocates its own activations, so `opt.batch` does not depend on how the GPT was built. Rows that
// share a prefix (multiple-choice choices) go through score_groups, which computes it once.
#include <algorithm>

#include "core/common.h"
#include "eval/core.h"
#include "eval/kv_decode.h"
#include "model/gpt.h"
#include "tok/tokenizer.h"

namespace clm {

nlohmann::json eval_core(GPT& model, const Tokenizer& tok, const CoreOptions& opt) {
  if ((int64_t)tok.vocab_size() > (int64_t)model.config().vocab_size)
    fail("CORE: the tokenizer has {} ids but the model's vocabulary is only {}", tok.vocab_size(), model.config().vocab_size);
  const int B = std::max(1, opt.batch);
  KVDecoder dec(model, B, model.config().seq_len, /*one_shot=*/true);
  CoreModel m;
  m.score = [&](const int32_t* in, const int32_t* tg, int b, int T, float* loss, int32_t* am) {
    dec.reset();
    dec.append(in, b, T);
    dec.score(tg, loss, am);
  };
  m.score_groups = [&](const int32_t* tokens, const std::vector<PrefixGroup>& groups, const int32_t* tg,
                       float* loss, int32_t* am) { dec.score_groups(tokens, groups, tg, loss, am); };
  m.encode = [&](const std::vector<std::string_view>& texts) { return tok.encode_batch(texts); };
  m.bos = tok.bos_id();
  m.context = model.config().seq_len;
  m.max_rows = B;
  return eval_core(m, opt);
}

}  // namespace clm

// eval_core for a GPT and a Tokenizer: the model's forward (per-token losses and argmax) as the
// CORE scorer, the tokenizer's batch encoder, rows cropped to the model's seq_len.
#include "core/common.h"
#include "eval/core.h"
#include "model/gpt.h"
#include "tok/tokenizer.h"

namespace clm {

nlohmann::json eval_core(GPT& model, const Tokenizer& tok, const CoreOptions& opt) {
  if ((int64_t)tok.vocab_size() != (int64_t)model.config().vocab_size)
    fail("CORE: the tokenizer has {} ids but the model was built for {}", tok.vocab_size(), model.config().vocab_size);
  CoreModel m;
  m.score = [&](const int32_t* in, const int32_t* tg, int B, int T, float* loss, int32_t* am) {
    model.forward(in, tg, B, T, loss, am);
  };
  m.encode = [&](const std::vector<std::string_view>& texts) { return tok.encode_batch(texts); };
  m.bos = tok.bos_id();
  m.context = model.config().seq_len;
  m.max_rows = opt.batch;
  return eval_core(m, opt);
}

}  // namespace clm

// eval_bpb for a GPT and a prepared dataset folder: the val split read by the training loader in
// file order (LoaderOptions{split="val", shuffle=false, loop=false}), byte lengths from the dataset's
// tokenizer. Used by periodic/final validation in training and by `clocklm eval bpb`.
#include "core/common.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "eval/bpb.h"
#include "model/gpt.h"

namespace clm {

BpbResult eval_bpb(GPT& model, const std::string& data_dir, int64_t val_tokens, int B, int T) {
  return eval_bpb(model, Dataset::open(data_dir), val_tokens, B, T);
}

BpbResult eval_bpb(GPT& model, const Dataset& ds, int64_t val_tokens, int B, int T) {
  if (ds.val_shards.empty()) fail("bpb: dataset {} has no val shards", ds.dir);
  if ((int64_t)ds.tokenizer.vocab_size() > (int64_t)model.config().vocab_size)
    fail("bpb: the dataset's tokenizer has {} ids but the model's vocabulary is only {}", ds.tokenizer.vocab_size(),
         model.config().vocab_size);
  LoaderOptions lo;
  lo.dir = ds.dir;
  lo.split = "val";
  lo.B = B;
  lo.T = T;
  lo.shuffle = false;
  lo.loop = false;
  DataLoader loader(lo);
  // Evaluation needs no gradients: skipping the fused head backward makes the forward ~3x cheaper
  // in the head. Training re-enables them (its next forward/backward pair follows).
  struct GradOff {
    GPT& m;
    ~GradOff() { m.set_grad_enabled(true); }
  } guard{model};
  model.set_grad_enabled(false);
  return eval_bpb([&](int32_t* in, int32_t* tg) { return loader.next(in, tg); },
                  [&](const int32_t* in, const int32_t* tg, int b, int t, float* loss) {
                    model.forward(in, tg, b, t, loss, nullptr);
                  },
                  ds.tokenizer.token_bytes(), val_tokens, B, T);
}

}  // namespace clm

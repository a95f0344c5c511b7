// eval_bpb for a GPT and a prepared dataset folder: the val split read by the training loader in
// file order (LoaderOptions{split="val", shuffle=false, loop=false}), byte lengths from the dataset's
// tokenizer. Used by periodic/final validation in training and by `clocklm eval bpb`.
#include <algorithm>

#include "core/common.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "eval/bpb.h"
#include "eval/finite_output.h"
#include "model/gpt.h"

namespace clm {

BpbResult eval_bpb(GPT& model, const std::string& data_dir, int64_t val_tokens, int B, int T,
                   std::FILE* progress, Comm* comm) {
  return eval_bpb(model, Dataset::open(data_dir), val_tokens, B, T, progress, comm);
}

BpbResult eval_bpb(GPT& model, const Dataset& ds, int64_t val_tokens, int B, int T, std::FILE* progress,
                   Comm* comm) {
  if (ds.val_shards.empty()) fail("bpb: dataset {} has no val shards", ds.dir);
  if ((int64_t)ds.tokenizer.vocab_size() > (int64_t)model.config().vocab_size)
    fail("bpb: the dataset's tokenizer has {} ids but the model's vocabulary is only {}", ds.tokenizer.vocab_size(),
         model.config().vocab_size);
  LoaderOptions lo;
  lo.dir = ds.dir;
  lo.split = "val";
  lo.B = 1;  // row by row, so a split that ends mid-batch is still scored in full (below)
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
  // Batches of B rows; when the split ends inside a batch, the missing rows get ignored targets
  // (-1), so the counted text is the same whatever B the caller (trainer or `eval bpb`) uses.
  bool ended = false;
  auto next_batch = [&](int32_t* in, int32_t* tg) {
    if (ended) return false;
    for (int r = 0; r < B; r++) {
      if (!loader.next(in + (size_t)r * T, tg + (size_t)r * T)) {
        if (r == 0) return false;
        std::fill(in + (size_t)r * T, in + (size_t)B * T, 0);
        std::fill(tg + (size_t)r * T, tg + (size_t)B * T, -1);
        ended = true;
        break;
      }
    }
    return true;
  };
  return eval_bpb(next_batch,
                  [&](const int32_t* in, const int32_t* tg, int b, int t, float* loss) {
                    try {
                      model.forward(in, tg, b, t, loss, nullptr);
                    } catch (const NonFiniteError& e) {  // the mean loss: said as sample says it
                      refuse_non_finite_output("bpb", e.what());
                    }
                  },
                  ds.tokenizer.token_bytes(), val_tokens, B, T, progress, comm);
}

}  // namespace clm

// Building the model, optimizer and loader of a training run (see train_setup.h).
#include "train/train_setup.h"

#include "core/common.h"

namespace clm {

TrainSetup build_train_setup(const RunConfig& cfg, Backend& be, const TrainSetupOptions& o) {
  TrainSetup s;
  s.model = std::make_unique<GPT>(cfg.model, o.batch, o.seq_len, be);
  s.model->init_weights(o.seed);
  if (o.optimizer) s.optimizer = std::make_unique<Optimizer>(s.model->params(), cfg.optim, o.comm);
  if (!o.loader.dir.empty()) s.loader = std::make_unique<DataLoader>(o.loader);
  return s;
}

size_t training_memory_bytes(const ModelConfig& model, int batch, int seq_len, Backend& be, bool accumulates) {
  const size_t extra_per_param = accumulates ? 12 : 8;
  return GPT::memory_need(model, batch, seq_len, be) + size_t(count_params(model).total()) * extra_per_param;
}

void fill_synthetic_tokens(uint64_t seed, int vocab_size, std::vector<int32_t>& inputs, std::vector<int32_t>& targets) {
  Rng rng(seed);
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = int32_t(rng.next() % uint64_t(vocab_size));
    targets[i] = int32_t(rng.next() % uint64_t(vocab_size));
  }
}

}  // namespace clm

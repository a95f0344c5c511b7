// What a training step runs on, built the same way wherever steps are run (`train`, `bench
// train`, `profile`, the planner's timings): the model with initialised weights on a backend, its
// optimizer, and for real data the training loader; plus the memory the training needs and
// synthetic token batches for timing runs that read no dataset.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "model/gpt.h"
#include "optim/optim.h"

namespace clm {

struct TrainSetupOptions {
  int batch = 1;              // rows per micro-batch the model's buffers are sized for
  int seq_len = 1024;         // tokens per row the model's buffers are sized for
  uint64_t seed = 1337;       // weight initialisation
  bool optimizer = true;      // false: model only (forward and backward timings)
  Comm* comm = nullptr;       // data parallelism: the optimizer's collectives (null: one process)
  // The training split's loader, built when `loader.dir` is set (its rank and world are the caller's).
  LoaderOptions loader;
};

struct TrainSetup {
  std::unique_ptr<GPT> model;
  std::unique_ptr<Optimizer> optimizer;  // null when TrainSetupOptions::optimizer is false
  std::unique_ptr<DataLoader> loader;    // null without TrainSetupOptions::loader.dir
};

TrainSetup build_train_setup(const RunConfig& cfg, Backend& be, const TrainSetupOptions& o);

// Device memory that training `model` needs with buffers for batch x seq_len tokens: the model's
// own need plus the optimizer's state (at most two fp32 moments per parameter; Muon keeps one) and,
// when a step accumulates several micro-batches, one gradient-sized sum.
size_t training_memory_bytes(const ModelConfig& model, int batch, int seq_len, Backend& be, bool accumulates);

// Fills inputs and targets (the same size) with token ids drawn uniformly from [0, vocab_size)
// by Rng(seed), each input id followed by its target: the batches of timing runs without data.
void fill_synthetic_tokens(uint64_t seed, int vocab_size, std::vector<int32_t>& inputs, std::vector<int32_t>& targets);

}  // namespace clm

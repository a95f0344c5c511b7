// Opening a training run, the first phase of `train` (see trainer.cpp): the options checked, the
// ranks and the device, whether the run resumes, the resolved config checked against the dataset,
// and rank 0's claim on the run folder. RunContext carries all of it to the later phases.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "config/config.h"
#include "core/common.h"
#include "core/file_lock.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "train/trainer.h"

namespace clm {

// Everything the later phases share about this invocation: the options, the ranks and device, the
// run folder and whether it resumes, the resolved config and the dataset.
struct RunContext {
  explicit RunContext(const TrainOptions& options) : o(options) {}
  const TrainOptions& o;
  double start_time = now_seconds();
  std::string dir, ckpt_dir;
  bool resume_asked = false;  // --resume was given
  bool resuming = false;      // ... and the run has a checkpoint to continue from
  std::shared_ptr<Backend> device;
  Comm* comm = nullptr;
  int rank = 0, world = 1;
  bool lead = true;   // rank 0: the one rank that writes the run folder and prints progress
  bool quiet = false;
  RunConfig cfg;
  DatasetInfo info;
  std::optional<Dataset> dataset;  // the tokenizer, for bpb's byte lengths
  int threads = 1;
  int micro_batch = 1, seq_len = 1, eval_batch = 1;
  int64_t rank_tokens = 0;  // tokens of one micro-batch over all ranks
  std::optional<FileLock> lock;
  const TrainConfig& tc() const { return cfg.train; }
};

// Fills `run` from its options; with several ranks, collective (the resume decision is rank 0's).
void open_run(RunContext& run);

// The training split's loader: this rank's rows of micro_batch x seq_len, shuffled by the seed.
LoaderOptions train_loader_options(const RunContext& run);

}  // namespace clm

// The steps a training loop has queued on the device since it last read their results. Each step
// writes its loss sums and gradient clip into its own slice of one device buffer, so the loop can
// let several steps run without reading anything and then read all of them in one to_host: a
// step's scalars are needed on the host only for a metrics row, an evaluation, a checkpoint or
// the loop's end, and a non-finite step has already skipped its own update on the device.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "train/train_step.h"

namespace clm {

class StepWindow {
 public:
  // Room for `capacity` steps of up to `max_accum` micro-batches each (at least one step).
  StepWindow(Backend& be, int64_t max_accum, int capacity);
  bool empty() const { return steps_.empty(); }
  int size() const { return int(steps_.size()); }
  // Whether a step of `accum` micro-batches still fits; when not, the caller reads first.
  bool fits(int64_t accum) const;
  // The device doubles the next step of `accum` micro-batches writes its scalars to
  // (StepOptions::scalars); then add() records it under its step index.
  double* next(int64_t accum);
  void add(QueuedStep q, int64_t step_index);

  struct Read {
    StepResult last;         // the newest step's result (loss, aux, grad_norm)
    std::string error;       // the first non-finite step's message, "" when every step was finite
    int64_t error_step = -1; // ... and its step index
  };
  // One to_host of every queued step's scalars; each step not applied on the device has its step
  // counts taken back from `opt`. Empties the window.
  Read read(Optimizer* opt);

 private:
  Backend& be_;
  DeviceBuffer buf_;
  int64_t capacity_doubles_ = 0, used_ = 0;
  std::vector<QueuedStep> steps_;
  std::vector<int64_t> offsets_, indices_;
};

}  // namespace clm

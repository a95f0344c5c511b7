// The queued steps of a training loop (see step_window.h).
#include "train/step_window.h"

#include <algorithm>

#include "core/common.h"

namespace clm {

StepWindow::StepWindow(Backend& be, int64_t max_accum, int capacity)
    : be_(be), capacity_doubles_(QueuedStep::scalar_doubles(max_accum) * std::max(1, capacity)) {
  // Allocated once, before the first step: nothing is allocated while steps are queued.
  buf_ = DeviceBuffer(be, sizeof(double) * size_t(capacity_doubles_));
}

bool StepWindow::fits(int64_t accum) const {
  return used_ + QueuedStep::scalar_doubles(accum) <= capacity_doubles_;
}

double* StepWindow::next(int64_t accum) {
  if (!fits(accum)) fail("step window: no room for a step of {} micro-batches", accum);
  return buf_.as<double>() + used_;
}

void StepWindow::add(QueuedStep q, int64_t step_index) {
  offsets_.push_back(used_);
  indices_.push_back(step_index);
  used_ += QueuedStep::scalar_doubles(q.accum);
  steps_.push_back(std::move(q));
}

StepWindow::Read StepWindow::read(Optimizer* opt) {
  Read r;
  if (steps_.empty()) return r;
  std::vector<double> host(static_cast<size_t>(used_));
  be_.to_host(host.data(), buf_.as<double>(), sizeof(double) * host.size());
  for (size_t i = 0; i < steps_.size(); ++i) {
    StepResult sr;
    const std::string bad = finish_step(steps_[i], host.data() + offsets_[i], opt, sr);
    if (!bad.empty() && r.error.empty()) {
      r.error = bad;
      r.error_step = indices_[i];
    }
    if (i + 1 == steps_.size()) r.last = std::move(sr);
  }
  steps_.clear();
  offsets_.clear();
  indices_.clear();
  used_ = 0;
  return r;
}

}  // namespace clm

// The device-time budget clock: accumulates the measured duration of each training step (forward,
// backward, optimizer) and decides, before a step starts, whether it still fits. Start-up, data
// set-up, evaluation and checkpointing happen outside steps and are never counted.
#pragma once
#include <cstdint>
#include <vector>

namespace clm {

struct BudgetClock {
  double budget = 0;           // seconds; <= 0 = unlimited
  double used = 0;             // seconds of steps so far (restored from checkpoints)
  std::vector<double> recent;  // durations of the last few steps (newest last)
  static constexpr int kWindow = 5;

  // The next step's predicted duration: the median of the recent steps (robust to one slow step,
  // e.g. the first one that builds the kernels' primitives); 0 before any step.
  double predict_next() const;
  // True when a step predicted to take predict_next() ends within the budget. The first step of a
  // session always runs if any budget is left, so training stops within one step of the budget.
  bool next_step_fits() const;
  void add_step(double seconds);
  double fraction() const;  // used / budget in [0, 1]; 0 when unlimited
};

}  // namespace clm

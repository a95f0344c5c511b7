// The optimizer over a model's parameters: AdamW and Muon groups routed by ParamKind, run on the
// parameters' backend (the moments live on the same device).
#pragma once
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "optim/optim_config.h"
#include "model/gpt.h"

namespace clm {

struct OptimizerImpl;
struct Optimizer {
  Optimizer(std::vector<Param>& params, const OptimConfig& cfg);
  ~Optimizer();
  Optimizer(Optimizer&&) noexcept;
  Optimizer& operator=(Optimizer&&) noexcept;
  // One update from the params' current grads. lr_scale multiplies every group's lr (schedule),
  // wd_scale every group's weight decay; muon_momentum >= 0 overrides Muon's momentum (warmup).
  // Returns the global gradient norm before clipping. When it is not finite nothing is updated.
  float step(float lr_scale, float wd_scale = 1.0f, float muon_momentum = -1.0f);
  std::string group_of(const std::string& param_name) const;  // "matrix" | "embed" | "head" | "scalar"
  // Builds the Newton-Schulz matmul primitives for every Muon shape (one-time JIT cost, kept out of
  // the training budget). Touches no parameter or optimizer state.
  void warmup();
  void save(std::ostream& out) const;  // optimizer state (moments, step count)
  void load(std::istream& in);         // throws Error on mismatch
  void set_profiler(Profiler* p);
  std::unique_ptr<OptimizerImpl> impl;
};

}  // namespace clm

// Derived shapes of a ModelConfig that the model code needs (kept apart from config parsing); the
// counts are read off its ModelLayout (model/layout.h).
#include <algorithm>
#include <cmath>

#include "model/config.h"
#include "model/layout.h"

namespace clm {

// mlp_ratio*d_model rounded up to a multiple of 64 (at least 64). SwiGLU has three matrices instead
// of two, so it uses 2/3 of that width (again rounded up to 64) to keep parameters comparable.
int ModelConfig::mlp_hidden() const {
  auto up64 = [](double h) { return std::max(64, int(std::ceil(h / 64.0 - 1e-9)) * 64); };
  int h = up64(double(mlp_ratio) * d_model);
  if (activation == "swiglu") h = up64(h * 2.0 / 3.0);
  return h;
}

ParamCount count_params(const ModelConfig& m) { return model_layout(m).counts; }

double mean_attended_keys(int T, int window) {
  if (T <= 0) return 0;
  if (window <= 0 || window >= T) return (double(T) + 1.0) / 2.0;
  // positions 0..W-1 see p + 1 keys, the remaining T - W see W each
  const double W = window;
  return (W * (W + 1.0) / 2.0 + (double(T) - W) * W) / double(T);
}

double flops_per_token(const ModelConfig& m, int T) { return model_layout(m).flops_per_token(T); }

}  // namespace clm

// Derived shapes of a ModelConfig that the model code needs (kept apart from config parsing).
#include <algorithm>
#include <cmath>

#include "model/config.h"

namespace clm {

// mlp_ratio*d_model rounded up to a multiple of 64 (at least 64). SwiGLU has three matrices instead
// of two, so it uses 2/3 of that width (again rounded up to 64) to keep parameters comparable.
int ModelConfig::mlp_hidden() const {
  auto up64 = [](double h) { return std::max(64, int(std::ceil(h / 64.0 - 1e-9)) * 64); };
  int h = up64(double(mlp_ratio) * d_model);
  if (activation == "swiglu") h = up64(h * 2.0 / 3.0);
  return h;
}

}  // namespace clm

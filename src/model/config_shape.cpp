// Derived shapes of a ModelConfig that the model code needs (kept apart from config parsing).
#include <algorithm>
#include <cmath>

#include "model/config.h"

namespace clm {

// mlp_ratio*d_model rounded to the nearest multiple of 64 (at least 64). SwiGLU has three matrices
// instead of two, so it uses 2/3 of that width (again rounded to 64) to keep parameters comparable.
int ModelConfig::mlp_hidden() const {
  double h = double(mlp_ratio) * d_model;
  if (activation == "swiglu") h = h * 2.0 / 3.0;
  int r = int(std::lround(h / 64.0)) * 64;
  return std::max(64, r);
}

}  // namespace clm

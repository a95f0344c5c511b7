// The one check that a model output (a loss, a logit) is a number, shared by `eval bpb` and
// `sample`, so a checkpoint whose weights are not finite is refused by both with the same message
// instead of one of them printing garbage.
#pragma once
#include <cmath>
#include <string_view>

#include "core/common.h"

namespace clm {

// Throws Error "<what>: the model's output is not finite (<kind> <value>); ..." when v is NaN or inf.
inline void require_finite_output(float v, std::string_view what, std::string_view kind) {
  if (!std::isfinite(v))
    fail("{}: the model's output is not finite ({} {}); the checkpoint's weights are probably not finite", what,
         kind, v);
}

}  // namespace clm

// The one check that a model output (a loss, a logit) is a number, shared by `eval bpb` and
// `sample`, so a checkpoint whose weights are not finite is refused by both with the same message
// instead of one of them printing garbage.
#pragma once
#include <cmath>
#include <string_view>

#include "core/common.h"

namespace clm {

// Throws NonFiniteError "<what>: the model's output is not finite (<detail>); ...". A
// NonFiniteError, so training's periodic evaluation still reports it as divergence.
[[noreturn]] inline void refuse_non_finite_output(std::string_view what, std::string_view detail) {
  throw NonFiniteError(fmt::format(
      "{}: the model's output is not finite ({}); the checkpoint's weights are probably not finite", what, detail));
}

// refuse_non_finite_output when v is NaN or infinite; `kind` names v ("logit", "target loss").
inline void require_finite_output(float v, std::string_view what, std::string_view kind) {
  if (!std::isfinite(v)) refuse_non_finite_output(what, fmt::format("{} {}", kind, v));
}

}  // namespace clm

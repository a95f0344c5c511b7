// The server stage's single number: half validation bits per byte, half CORE. The two are put on
// one scale, higher is better, before they are averaged (docs/TRAINING.md, "The server stage",
// explains the choice):
//   bpb term  = 1 - val_bpb      (bits per byte saved below one bit per byte)
//   CORE term = CORE             (mean centered accuracy; 0 = chance, 1 = perfect)
//   score     = 0.5 * bpb term + 0.5 * CORE term
#pragma once
#include <nlohmann/json.hpp>

namespace clm {

// {"score", "bpb_term", "core_term", "val_bpb", "core", "formula"} for summary.json.
nlohmann::json bpb_core_score(double val_bpb, double core);

}  // namespace clm

// The server stage's combined score (see combined_score.h).
#include "eval/combined_score.h"

namespace clm {

nlohmann::json bpb_core_score(double val_bpb, double core) {
  const double bpb_term = 1.0 - val_bpb, core_term = core;
  return {{"score", 0.5 * bpb_term + 0.5 * core_term},
          {"bpb_term", bpb_term},
          {"core_term", core_term},
          {"val_bpb", val_bpb},
          {"core", core},
          {"formula", "0.5 * (1 - val_bpb) + 0.5 * CORE"}};
}

}  // namespace clm

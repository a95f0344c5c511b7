// Validation bits per byte, exactly as defined in docs/EVAL.md: sum of target cross-entropy (nats)
// over ln2 * sum of target byte lengths, BOS targets excluded from both. Owned by issue 4.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace clm {

struct GPT;

struct BpbResult {
  double bpb = 0;
  double nats = 0;         // summed cross-entropy over counted targets
  int64_t tokens = 0;      // counted target tokens (BOS excluded)
  int64_t bytes = 0;       // summed byte lengths of counted targets
  nlohmann::json to_json() const;
};

// Evaluate on the first `val_tokens` target positions of the dataset's val split, rows built
// exactly as the training loader builds them (no shuffle), B rows of T per forward.
BpbResult eval_bpb(GPT& model, const std::string& data_dir, int64_t val_tokens, int B, int T);

}  // namespace clm

// Validation bits per byte, exactly as defined in docs/EVAL.md: sum of target cross-entropy (nats)
// over ln2 * sum of target byte lengths, BOS targets excluded from both. With several ranks the
// batches are split among them and the result is bit-identical to one process's.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clm {

struct GPT;
struct Dataset;
class Comm;

// The definition, recorded next to every bpb number (summary.json, eval --json).
extern const char* const kBpbDefinition;

struct BpbResult {
  double bpb = 0;
  double nats = 0;         // summed cross-entropy over counted targets
  int64_t tokens = 0;      // counted target tokens (BOS excluded)
  int64_t bytes = 0;       // summed byte lengths of counted targets
  int64_t positions = 0;   // target positions visited (= val_tokens unless the split ran out)
  int64_t val_tokens = 0;  // requested number of target positions
  int T = 0;               // row length used (rows of T+1 tokens from the loader)
  double seconds = 0;
  nlohmann::json to_json() const;
};

// Evaluate on the first `val_tokens` target positions of the dataset's val split, rows built
// exactly as the training loader builds them (no shuffle), B rows of T per forward.
// progress: where a progress line goes (tokens scored, tokens/s, ETA); null = silent.
// comm: with several ranks, batch i is scored by rank i mod world and the partial sums are
// combined exactly (see the loop below); every rank must call it and gets the same result.
BpbResult eval_bpb(GPT& model, const std::string& data_dir, int64_t val_tokens, int B, int T,
                   std::FILE* progress = nullptr, Comm* comm = nullptr);
// The same on an already opened dataset (the training loop keeps one open).
BpbResult eval_bpb(GPT& model, const Dataset& ds, int64_t val_tokens, int B, int T,
                   std::FILE* progress = nullptr, Comm* comm = nullptr);

// ---- the model-independent parts (tested with stubs) ----------------------------------------
// Adds n target positions: targets < 0 are skipped (not positions), special tokens (byte length 0,
// e.g. BOS) count as positions but add neither nats nor bytes.
void bpb_accumulate(BpbResult& r, const int32_t* targets, const float* token_loss, int64_t n,
                    const std::vector<uint32_t>& token_bytes);
void bpb_finalize(BpbResult& r);  // bpb = nats / (ln 2 * bytes)

// Fills B*T inputs and targets; returns false when no batch is left.
using BpbBatchSource = std::function<bool(int32_t* inputs, int32_t* targets)>;
// Computes per-position losses (nats) for B rows of T (GPT::forward's token_loss contract).
using BpbScorer = std::function<void(const int32_t* inputs, const int32_t* targets, int B, int T, float* token_loss)>;
// The evaluation loop: takes batches in order, counts exactly the first val_tokens target positions
// (row-major; the last batch is cut, and only its needed rows are scored) and accumulates. With a
// communicator of several ranks, every rank reads every batch but scores only its own (batch i on
// rank i mod world); the per-batch sums are then exchanged (each has exactly one non-zero
// contributor, so the all-reduce adds zeros only) and added in batch order, as one process adds
// them, so the result is bit-identical to a single process's.
BpbResult eval_bpb(const BpbBatchSource& next, const BpbScorer& score, const std::vector<uint32_t>& token_bytes,
                   int64_t val_tokens, int B, int T, std::FILE* progress = nullptr, Comm* comm = nullptr);

}  // namespace clm

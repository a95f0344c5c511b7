// The research journal of an experiment queue: for every experiment, what was tried and why (the
// submitter's hypothesis), how its config differs from a named baseline run, what came out (val
// bpb, tokens/s, device time) and the change against the baseline. `clocklm exp journal` renders
// all entries as markdown with the ledger and a leaderboard plot.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lab/queue.h"

namespace clm {

// One entry: {id, name, state, reason, hypothesis, config, set, submitted, finished,
//   result: {val_bpb, tokens_per_second, device_seconds, run_device_seconds, steps, tokens, params}
//   | null, baseline: {ref, run_dir, val_bpb, tokens_per_second, device_seconds} | null (with
//   "error" when it cannot be read), config_diff: [{key, baseline, value}], delta: {val_bpb,
//   tokens_per_second, tokens_per_second_ratio, device_seconds} | null}.
// Computed from the files as they are now.
nlohmann::json journal_entry(ExperimentQueue& q, const Experiment& e);
// Writes EXP/journal.json; the runner calls it when an experiment finishes.
void record_journal_entry(ExperimentQueue& q, const Experiment& e);

struct JournalFiles {
  std::string markdown;
  std::vector<std::string> plots;
  std::vector<std::string> notes;
  std::vector<nlohmann::json> entries;
};
// Writes `out` (default QUEUE/journal.md): the ledger, the leaderboard (table and a plot of val bpb
// per experiment with the best so far, `<out stem>-leaderboard.{svg,png}` beside it), then one
// section per experiment in id order, unfinished and failed ones included.
JournalFiles write_journal(ExperimentQueue& q, const std::string& out = "");

}  // namespace clm

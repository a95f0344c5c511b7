// What the experiment tools report, shared by `clocklm exp` and the MCP tools so both say the
// same: the queue's overview (ledger, runner, counts by state) and one experiment's results
// (summary, metrics tail, profile table, journal entry).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "lab/queue.h"

namespace clm {

// {queue, ledger (Ledger::to_json), ledger_text, runner: {pid, started} | null, counts: {state: n},
//  queued: [ids in run order]}
nlohmann::json queue_status(ExperimentQueue& q);
// {experiment (experiment_json), summary (summary.json or null), metrics_tail (last `tail` rows),
//  profile_table (RUN/profile/profile.txt or null), journal (journal_entry), log_tail (last lines
//  of train.log)}
nlohmann::json experiment_results(ExperimentQueue& q, const Experiment& e, int tail = 10);

}  // namespace clm

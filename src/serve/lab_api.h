// What the dashboard's pages ask the server for, as JSON built from the run index and the
// experiment queues: the runs table, a run's metrics from a row on, a run's page (config, plan,
// profile, checkpoints), a comparison of configs and the lab (queue, ledger, journal). Everything
// here only reads; the HTTP layer (serve/http_server.h) maps requests to these.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/run_index.h"

namespace clm {

// One row per run, the facts `leaderboard` shows plus status: {id, name, config, params, device,
// budget_seconds, device_seconds, steps, tokens, tokens_per_second, val_bpb, core, loss, status,
// updated, rows}.
nlohmann::json runs_json(const std::vector<std::shared_ptr<const IndexedRun>>& runs);
nlohmann::json run_row_json(const IndexedRun& r);

// Metrics rows [from, from + limit) with only the keys the curves draw: {id, status, from, next,
// total, budget_seconds, rows: [{step, tokens, device_seconds, loss, val_bpb}]}.
nlohmann::json metrics_json(const IndexedRun& r, size_t from, size_t limit);

// A run's page: {row (run_row_json), config, run, summary, plan (RUN/plan.json or null), profile
// (RUN/profile/profile.json or null), has_trace, checkpoints: [{name, step, bytes, latest}],
// warnings}.
nlohmann::json run_page_json(const IndexedRun& r);

// Configs side by side: {runs: [ids], keys: [{key, values, differs}]}.
nlohmann::json compare_json(const std::vector<std::shared_ptr<const IndexedRun>>& runs);

// The experiment queues under the roots (a root itself, or a folder right below it), read without
// taking their locks: [{dir, runner: runner.json | null, ledger: {experiments, spent, reserved,
// cap, remaining}, experiments: [{id, name, state, reason, config, set, budget, hypothesis,
// submitted, finished, device_seconds, journal: EXP/journal.json | null}]}].
nlohmann::json lab_json(const std::vector<std::string>& roots);

// The newest complete checkpoint of a run, or "" when it has none.
std::string run_checkpoint(const IndexedRun& r);

// A file inside the run's folder by its path relative to the folder ("profile/trace.json"), or ""
// when it is missing or its real path leaves the folder (a symlink out).
std::string file_inside_run(const IndexedRun& r, const std::string& rel);

}  // namespace clm

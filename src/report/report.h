// Reports on recorded runs: `runs` (list), `report` (one run: report.md + plots), `compare` (side by
// side, differences highlighted, overlaid curves) and `leaderboard` (ranked by final val bpb).
#pragma once
#include <string>
#include <vector>

#include "report/runs.h"

namespace clm {

using Table = std::vector<std::vector<std::string>>;  // first row = header
std::string text_table(const Table& t);                // aligned columns for the terminal
std::string md_table(const Table& t);                  // GitHub markdown

// One row per run: run, config, params, steps, tokens, device time, tok/s, val bpb, CORE, status.
Table runs_table(const std::vector<RunData>& runs);
// Runs sorted by final val bpb (runs without one last): rank, run, config, val bpb, CORE, ...
Table leaderboard_table(const std::vector<RunData>& runs);
std::vector<const RunData*> ranked(const std::vector<RunData>& runs);

struct ReportFiles {
  std::string markdown;              // path of the .md written
  std::vector<std::string> plots;    // every image written
  std::vector<std::string> notes;    // e.g. "gnuplot not found; wrote SVG only"
};

// Writes RUN/report.md and RUN/{train_loss_time,train_loss_tokens,val_bpb_time,val_bpb_tokens,
// throughput}.{svg,png}.
ReportFiles write_report(const RunData& run);
// Writes OUT/compare.md and overlaid OUT/*.{svg,png} for two or more runs.
ReportFiles write_compare(const std::vector<RunData>& runs, const std::string& out_dir);
// Writes OUT/leaderboard.md (used by sweep).
std::string write_leaderboard(const std::vector<RunData>& runs, const std::string& out_path, const std::string& title);

}  // namespace clm

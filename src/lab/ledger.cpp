// Device-time accounting of the experiment queue (see ledger.h). Only the trainer's own numbers
// are used (summary.json and metrics.jsonl record device seconds, which count step time only),
// so the ledger agrees with what `runs` and `leaderboard` show for the same runs.
#include "lab/ledger.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "checkpoint/checkpoint.h"
#include "core/common.h"
#include "core/json_parse.h"
#include "report/runs.h"

namespace clm {

double Ledger::remaining() const {
  return capped() ? cap - spent - reserved : std::numeric_limits<double>::infinity();
}

double Ledger::charge(const nlohmann::json& state, double budget_seconds, const std::string& run_dir) {
  const double used = experiment_device_seconds(state, run_dir);
  const std::string st = state.value("state", "queued");
  ++experiments;
  spent += used;
  if (st == "queued" || st == "running") reserved += std::max(0.0, budget_seconds - run_device_seconds(run_dir));
  return used;
}

nlohmann::json Ledger::to_json() const {
  nlohmann::json j = {{"spent_device_seconds", spent},
                      {"reserved_device_seconds", reserved},
                      {"experiments", experiments}};
  j["cap_device_seconds"] = capped() ? nlohmann::json(cap) : nlohmann::json();
  j["remaining_device_seconds"] = capped() ? nlohmann::json(remaining()) : nlohmann::json();
  return j;
}

std::string Ledger::describe() const {
  std::string s = capped() ? fmt::format("spent {} of {}", fmt_seconds(spent), fmt_seconds(cap))
                           : fmt::format("spent {} (no cap)", fmt_seconds(spent));
  s += fmt::format(", {} reserved by queued and running experiments", fmt_seconds(reserved));
  if (capped()) s += fmt::format(", {} remaining", fmt_seconds(std::max(0.0, remaining())));
  return s;
}

void check_cap(const Ledger& l, double budget_seconds, const std::string& queue_dir) {
  if (!l.capped() || budget_seconds <= l.remaining()) return;
  fail(
      "device-time cap reached: this experiment asks for {} but the queue {} has {} left ({}; "
      "raise the cap with `clocklm exp init --queue {} --cap DURATION`)",
      fmt_seconds(budget_seconds), queue_dir, fmt_seconds(std::max(0.0, l.remaining())),
      l.describe(), queue_dir);
}

double run_device_seconds(const std::string& run_dir) {
  try {
    if (path_exists(run_dir + "/summary.json")) {
      auto s = parse_json(read_file(run_dir + "/summary.json"), run_dir + "/summary.json");
      if (s.contains("device_seconds") && s["device_seconds"].is_number())
        return s["device_seconds"].get<double>();
    }
    if (!path_exists(run_dir + "/metrics.jsonl")) return 0;
    std::vector<std::string> warnings;
    auto rows =
        parse_metrics(read_file(run_dir + "/metrics.jsonl"), run_dir + "/metrics.jsonl", &warnings);
    for (auto it = rows.rbegin(); it != rows.rend(); ++it)
      if (it->contains("device_seconds") && (*it)["device_seconds"].is_number())
        return (*it)["device_seconds"].get<double>();
  } catch (const std::exception&) {
    // A run whose files cannot be read has no device time we can vouch for.
  }
  return 0;
}

bool has_checkpoint(const std::string& run_dir) {
  return path_exists(run_dir + "/checkpoints/latest");
}

double checkpoint_device_seconds(const std::string& run_dir) {
  if (!has_checkpoint(run_dir)) return 0;
  try {
    return read_checkpoint_meta(latest_checkpoint(run_dir)).value("budget_used", 0.0);
  } catch (const Error&) {
    return 0;
  }
}

double experiment_device_seconds(const nlohmann::json& state, const std::string& run_dir) {
  double total = 0;
  if (!state.contains("attempts")) return 0;
  for (const auto& a : state["attempts"]) {
    if (a.contains("device_seconds") && a["device_seconds"].is_number()) {
      total += a["device_seconds"].get<double>();
    } else {  // still running: what the run recorded since this attempt started
      total += std::max(0.0, run_device_seconds(run_dir) - a.value("start_device_seconds", 0.0));
    }
  }
  return total;
}

}  // namespace clm

// Reports on the experiment queue (see exp_results.h).
#include "lab/exp_results.h"

#include <map>

#include "core/common.h"
#include "core/json_parse.h"
#include "lab/journal.h"
#include "report/runs.h"

namespace clm {

nlohmann::json queue_status(ExperimentQueue& q) {
  auto exps = q.list();
  std::map<std::string, int> counts;
  nlohmann::json queued = nlohmann::json::array();
  for (const auto& e : exps) {
    counts[e.status()]++;
    if (e.status() == "queued") queued.push_back(e.id);
  }
  Ledger l = q.ledger();
  return {{"queue", q.dir()},          {"ledger", l.to_json()}, {"ledger_text", l.describe()},
          {"runner", q.runner_info()}, {"counts", counts},      {"queued", queued}};
}

static std::string tail_lines(const std::string& text, int n) {
  size_t p = text.size();
  if (p > 0 && text[p - 1] == '\n') --p;
  for (int i = 0; i < n && p != std::string::npos && p > 0; ++i) p = text.rfind('\n', p - 1);
  return p == std::string::npos || p == 0 ? text : text.substr(p + 1);
}

nlohmann::json experiment_results(ExperimentQueue& q, const Experiment& e, int tail) {
  nlohmann::json j = {{"experiment", experiment_json(e)},        {"summary", nullptr},
                      {"metrics_tail", nlohmann::json::array()}, {"profile_table", nullptr},
                      {"journal", journal_entry(q, e)},          {"log_tail", ""}};
  std::string run = e.run_dir();
  if (path_exists(run + "/summary.json"))
    j["summary"] = parse_json(read_file(run + "/summary.json"), run + "/summary.json");
  if (path_exists(run + "/metrics.jsonl")) {
    std::vector<std::string> warnings;
    auto rows = parse_metrics(read_file(run + "/metrics.jsonl"), run + "/metrics.jsonl", &warnings);
    size_t from = rows.size() > size_t(tail) ? rows.size() - size_t(tail) : 0;
    for (size_t i = from; i < rows.size(); ++i) j["metrics_tail"].push_back(rows[i]);
  }
  if (path_exists(run + "/profile/profile.txt"))
    j["profile_table"] = read_file(run + "/profile/profile.txt");
  if (path_exists(e.log_path())) j["log_tail"] = tail_lines(read_file(e.log_path()), 20);
  return j;
}

}  // namespace clm

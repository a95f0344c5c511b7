// Reading training run directories (layout in docs/FORMATS.md): config.json, run.json,
// metrics.jsonl and summary.json, plus the key numbers `runs`, `report`, `compare` and
// `leaderboard` show.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace clm {

struct RunData {
  std::string dir;                       // as given (no trailing slash)
  std::string name;                      // label: the folder name
  nlohmann::json config;                 // config.json (null if absent)
  nlohmann::json run;                    // run.json (null if absent)
  nlohmann::json summary;                // summary.json (null: unfinished or crashed run)
  std::vector<nlohmann::json> metrics;   // metrics.jsonl rows, in file order
  std::vector<std::string> warnings;     // e.g. a torn last metrics line that was skipped

  bool finished() const { return summary.is_object(); }
  std::string config_name() const;       // summary.config(_name), config.json name, or "?"
  // Key numbers, from summary.json when the run finished, else from the last metrics row.
  // NaN when unknown.
  double val_bpb() const;                // final validation bpb (last measured if unfinished)
  double core() const;                   // CORE score (summary.core or summary.core.core)
  double steps() const;
  double tokens() const;
  double device_seconds() const;
  double tokens_per_second() const;
  double params() const;
  double last_loss() const;
  double model_flops_per_second() const;  // summary, else the median over metrics rows
  double mfu() const;                     // median of the metrics rows' "mfu" (model FLOP/s / peak)
  // (x, y) of every metrics row that has both keys as numbers, e.g. ("device_seconds", "loss").
  std::vector<std::pair<double, double>> series(const std::string& x, const std::string& y) const;
};

// Loads one run. Throws Error naming the file when the directory or metrics.jsonl is missing
// (unless !require_metrics), or when a file is malformed (a metrics line that is not a JSON object
// with a numeric "step"). A torn final line (no newline: the run was killed mid-write) is skipped
// with a warning instead.
RunData load_run(const std::string& dir, bool require_metrics = true);
// metrics.jsonl text -> rows; `what` names the file in errors.
std::vector<nlohmann::json> parse_metrics(const std::string& text, const std::string& what,
                                          std::vector<std::string>* warnings = nullptr);
// Run directories at or below `root` (depth <= 3): folders holding summary.json or metrics.jsonl,
// sorted by path. Throws Error if root does not exist.
std::vector<std::string> find_runs(const std::string& root);
// Loads every run under root; runs that fail to load are reported in `errors` (path: message).
std::vector<RunData> load_runs(const std::string& root, std::vector<std::string>* errors);

// Flattened config: {"model.n_layer": "8", "optim.matrix.lr": "0.02", ...} (values as JSON text).
std::vector<std::pair<std::string, std::string>> flatten_json(const nlohmann::json& j);
// Every flattened key of several configs (first-seen order), its value in each config ("(absent)"
// where a config lacks it), and whether the values differ: what `compare` and the journal show.
struct ConfigKeyValues {
  std::string key;
  std::vector<std::string> values;
  bool differs = false;
};
std::vector<ConfigKeyValues> config_key_values(const std::vector<nlohmann::json>& configs);

// Formatting shared by the exp commands: "51.2M", "1.3B", "12.5k", "-" for NaN.
std::string fmt_si(double v, int digits = 1);
std::string fmt_seconds(double s);  // "95s" -> "1m35s", "1h02m"
std::string fmt_num(double v, int decimals);  // "-" for NaN

}  // namespace clm

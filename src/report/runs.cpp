// Run directory reader (see runs.h). Lenient about optional files and fields (older or unfinished
// runs lack some), strict about malformed content: a bad line is an error naming file and line.
#include "report/runs.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "core/common.h"
#include "core/json_parse.h"

namespace clm {

namespace fs = std::filesystem;
static const double kNaN = std::numeric_limits<double>::quiet_NaN();

static double num(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return kNaN;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return kNaN;
  return it->get<double>();
}

std::string RunData::config_name() const {
  for (const char* k : {"config_name", "config"})
    if (summary.is_object() && summary.contains(k) && summary[k].is_string()) return summary[k];
  if (config.is_object() && config.contains("name") && config["name"].is_string()) return config["name"];
  return "?";
}

// A key number: summary.json first, else the last metrics row that has it.
static double key_number(const RunData& r, const char* key) {
  double v = num(r.summary, key);
  if (!std::isnan(v)) return v;
  for (auto it = r.metrics.rbegin(); it != r.metrics.rend(); ++it) {
    v = num(*it, key);
    if (!std::isnan(v)) return v;
  }
  return kNaN;
}

double RunData::val_bpb() const { return key_number(*this, "val_bpb"); }
double RunData::steps() const { return key_number(*this, "step") ; }
double RunData::tokens() const { return key_number(*this, "tokens"); }
double RunData::device_seconds() const { return key_number(*this, "device_seconds"); }
double RunData::last_loss() const {
  for (auto it = metrics.rbegin(); it != metrics.rend(); ++it)
    if (double v = num(*it, "loss"); !std::isnan(v)) return v;
  return kNaN;
}
double RunData::tokens_per_second() const {
  double v = num(summary, "tokens_per_second");
  if (!std::isnan(v)) return v;
  double t = tokens(), s = device_seconds();
  return (s > 0 && !std::isnan(t)) ? t / s : kNaN;
}
double RunData::params() const {
  double v = num(summary, "params");
  return std::isnan(v) ? num(run, "params") : v;
}
static double median_of(const RunData& r, const char* key) {
  std::vector<double> v;
  for (const auto& row : r.metrics)
    if (double x = num(row, key); !std::isnan(x)) v.push_back(x);
  if (v.empty()) return kNaN;
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double RunData::model_flops_per_second() const {
  double v = num(summary, "model_flops_per_second");
  return std::isnan(v) ? median_of(*this, "model_flops_per_second") : v;
}

double RunData::mfu() const { return median_of(*this, "mfu"); }

double RunData::core() const {
  if (!summary.is_object() || !summary.contains("core")) return kNaN;
  const auto& c = summary["core"];
  if (c.is_number()) return c.get<double>();
  if (c.is_object()) return num(c, "core");
  return kNaN;
}

std::vector<std::pair<double, double>> RunData::series(const std::string& x, const std::string& y) const {
  std::vector<std::pair<double, double>> out;
  for (const auto& row : metrics) {
    double a = num(row, x.c_str()), b = num(row, y.c_str());
    if (!std::isnan(a) && !std::isnan(b) && std::isfinite(b)) out.emplace_back(a, b);
  }
  return out;
}

std::vector<nlohmann::json> parse_metrics(const std::string& text, const std::string& what,
                                          std::vector<std::string>* warnings) {
  std::vector<nlohmann::json> rows;
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    bool terminated = nl != std::string::npos;
    std::string line = text.substr(pos, terminated ? nl - pos : std::string::npos);
    pos = terminated ? nl + 1 : text.size();
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    if (!try_parse_json(line, j) || !j.is_object()) {
      if (!terminated) {  // the writer died mid-line; everything before it is good
        if (warnings) warnings->push_back(fmt::format("{} line {}: skipped a torn final line", what, line_no));
        break;
      }
      fail("{} line {}: malformed metrics row (not a JSON object)", what, line_no);
    }
    if (!j.contains("step") || !j["step"].is_number())
      fail("{} line {}: metrics row without a numeric \"step\"", what, line_no);
    rows.push_back(std::move(j));
  }
  return rows;
}

static nlohmann::json read_json_file(const std::string& path) {
  std::string text = read_file(path);
  nlohmann::json j = parse_json(text, path);
  if (!j.is_object()) fail("{}: expected a JSON object", path);
  return j;
}

RunData load_run(const std::string& dir_in, bool require_metrics) {
  RunData r;
  r.dir = dir_in;
  while (r.dir.size() > 1 && r.dir.back() == '/') r.dir.pop_back();
  std::error_code ec;
  if (!fs::is_directory(r.dir, ec)) fail("run directory {} does not exist", r.dir);
  r.name = fs::path(r.dir).filename().string();
  if (r.name.empty() || r.name == ".") r.name = fs::absolute(r.dir).filename().string();
  std::string metrics = r.dir + "/metrics.jsonl";
  if (path_exists(metrics)) r.metrics = parse_metrics(read_file(metrics), metrics, &r.warnings);
  else if (require_metrics) fail("{} is missing (is {} a training run directory?)", metrics, r.dir);
  for (auto [file, dst] : {std::pair{"config.json", &r.config}, {"run.json", &r.run}, {"summary.json", &r.summary}})
    if (path_exists(r.dir + "/" + file)) *dst = read_json_file(r.dir + "/" + file);
  return r;
}

static bool is_run_dir(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p / "summary.json", ec) || fs::exists(p / "metrics.jsonl", ec);
}

static void find_runs_rec(const fs::path& p, int depth, std::vector<std::string>& out) {
  if (is_run_dir(p)) {
    out.push_back(p.string());
    return;  // runs do not nest
  }
  if (depth <= 0) return;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(p, ec))
    if (e.is_directory(ec) && e.path().filename().string()[0] != '.') find_runs_rec(e.path(), depth - 1, out);
}

std::vector<std::string> find_runs(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) fail("directory {} does not exist", root);
  std::vector<std::string> out;
  find_runs_rec(fs::path(root), 3, out);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<RunData> load_runs(const std::string& root, std::vector<std::string>* errors) {
  std::vector<RunData> runs;
  for (const auto& d : find_runs(root)) {
    try {
      runs.push_back(load_run(d, false));
    } catch (const Error& e) {
      if (errors) errors->push_back(e.what());
    }
  }
  return runs;
}

static void flatten_rec(const nlohmann::json& j, const std::string& prefix,
                        std::vector<std::pair<std::string, std::string>>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten_rec(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else if (j.is_string()) {
    out.emplace_back(prefix, j.get<std::string>());
  } else {
    out.emplace_back(prefix, j.dump());
  }
}

std::vector<std::pair<std::string, std::string>> flatten_json(const nlohmann::json& j) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!j.is_null()) flatten_rec(j, "", out);
  return out;
}

std::vector<ConfigKeyValues> config_key_values(const std::vector<nlohmann::json>& configs) {
  std::vector<std::map<std::string, std::string>> flat;
  std::vector<std::string> keys;
  std::set<std::string> seen;
  for (const auto& c : configs) {
    flat.emplace_back();
    for (auto& [k, v] : flatten_json(c)) {
      flat.back()[k] = v;
      if (seen.insert(k).second) keys.push_back(k);
    }
  }
  std::vector<ConfigKeyValues> out;
  for (const auto& k : keys) {
    ConfigKeyValues kv{k, {}, false};
    for (auto& f : flat) kv.values.push_back(f.count(k) ? f[k] : "(absent)");
    kv.differs = std::any_of(kv.values.begin(), kv.values.end(), [&](const std::string& v) { return v != kv.values[0]; });
    out.push_back(std::move(kv));
  }
  return out;
}

std::string fmt_si(double v, int digits) {
  if (std::isnan(v)) return "-";
  double a = std::fabs(v);
  if (a >= 1e12) return fmt::format("{:.{}f}T", v / 1e12, digits);
  if (a >= 1e9) return fmt::format("{:.{}f}B", v / 1e9, digits);
  if (a >= 1e6) return fmt::format("{:.{}f}M", v / 1e6, digits);
  if (a >= 1e3) return fmt::format("{:.{}f}k", v / 1e3, digits);
  return fmt::format("{:.{}f}", v, a == std::floor(a) ? 0 : digits);
}

std::string fmt_seconds(double s) {
  if (std::isnan(s)) return "-";
  if (s < 60) return fmt::format("{:.1f}s", s);
  long t = long(std::lround(s));
  if (t < 3600) return fmt::format("{}m{:02d}s", t / 60, int(t % 60));
  return fmt::format("{}h{:02d}m", t / 3600, int((t % 3600) / 60));
}

std::string fmt_num(double v, int decimals) {
  if (std::isnan(v)) return "-";
  return fmt::format("{:.{}f}", v, decimals);
}

}  // namespace clm

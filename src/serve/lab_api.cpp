// JSON for the dashboard's pages (see lab_api.h).
#include "serve/lab_api.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "core/common.h"
#include "core/json_parse.h"
#include "lab/ledger.h"
#include "serve/run_index.h"

namespace clm {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// NaN and infinities are not JSON: they become null.
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// A shown file that is missing, too large or malformed is shown as null.
json read_json_or_null(const std::string& path) {
  try {
    return read_shown_json(path);
  } catch (const Error&) {
    return nullptr;
  }
}

double budget_seconds(const RunData& d) {
  for (const json* j : {&d.summary, &d.config}) {
    if (!j->is_object()) continue;
    if (j->contains("budget_seconds") && (*j)["budget_seconds"].is_number())
      return (*j)["budget_seconds"].get<double>();
    if (j->contains("train") && (*j)["train"].is_object() && (*j)["train"].contains("budget_seconds") &&
        (*j)["train"]["budget_seconds"].is_number())
      return (*j)["train"]["budget_seconds"].get<double>();
  }
  return NAN;
}

std::string device_of(const RunData& d) {
  for (const json* j : {&d.summary, &d.run})
    if (j->is_object() && j->contains("device") && (*j)["device"].is_string()) return (*j)["device"];
  return "";
}

}  // namespace

json run_row_json(const IndexedRun& r) {
  const RunData& d = r.data;
  return {{"id", r.id},
          {"name", d.name},
          {"config", d.config_name()},
          {"params", num(d.params())},
          {"device", device_of(d)},
          {"budget_seconds", num(budget_seconds(d))},
          {"device_seconds", num(d.device_seconds())},
          {"steps", num(d.steps())},
          {"tokens", num(d.tokens())},
          {"tokens_per_second", num(d.tokens_per_second())},
          {"val_bpb", num(d.val_bpb())},
          {"core", num(d.core())},
          {"loss", num(d.last_loss())},
          {"status", run_status_name(r.status)},
          {"updated", r.updated},
          {"rows", d.metrics.size()}};
}

json runs_json(const std::vector<std::shared_ptr<const IndexedRun>>& runs) {
  json out = json::array();
  for (const auto& r : runs) out.push_back(run_row_json(*r));
  return out;
}

json metrics_json(const IndexedRun& r, size_t from, size_t limit) {
  const auto& m = r.data.metrics;
  const size_t begin = std::min(from, m.size()), end = std::min(m.size(), begin + limit);
  json rows = json::array();
  for (size_t i = begin; i < end; ++i) {
    json row = json::object();
    for (const char* k : {"step", "tokens", "device_seconds", "loss", "val_bpb"})
      if (auto it = m[i].find(k); it != m[i].end() && it->is_number()) row[k] = *it;
    rows.push_back(std::move(row));
  }
  return {{"id", r.id},
          {"status", run_status_name(r.status)},
          {"from", begin},
          {"next", end},
          {"total", m.size()},
          {"budget_seconds", num(budget_seconds(r.data))},
          {"rows", std::move(rows)}};
}

std::string run_checkpoint(const IndexedRun& r) {
  try {
    return latest_checkpoint(r.dir);
  } catch (const Error&) {
    return "";
  }
}

std::string file_inside_run(const IndexedRun& r, const std::string& rel) {
  std::error_code ec;
  const fs::path root = fs::canonical(r.dir, ec);
  if (ec) return "";
  const fs::path real = fs::canonical(fs::path(r.dir) / rel, ec);
  if (ec || !fs::is_regular_file(real, ec)) return "";
  if (real.string().rfind(root.string() + "/", 0) != 0) return "";
  return real.string();
}

json run_page_json(const IndexedRun& r) {
  json cks = json::array();
  const std::string latest = run_checkpoint(r);
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(r.dir) / "checkpoints", ec))
    if (e.path().extension() == ".ckpt" && e.is_regular_file(ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    const std::string stem = p.stem().string();  // step_00000120
    json step = nullptr;
    if (stem.starts_with("step_")) step = std::strtoll(stem.c_str() + 5, nullptr, 10);
    cks.push_back({{"name", p.filename().string()},
                   {"step", step},
                   {"bytes", fs::file_size(p, ec)},
                   {"latest", !latest.empty() && fs::path(latest).filename() == p.filename()}});
  }
  const std::string plan = file_inside_run(r, "plan.json");
  const std::string profile = file_inside_run(r, "profile/profile.json");
  return {{"row", run_row_json(r)},
          {"dir", r.dir},
          {"config", r.data.config},
          {"run", r.data.run},
          {"summary", r.data.summary},
          {"plan", plan.empty() ? json(nullptr) : read_json_or_null(plan)},
          {"profile", profile.empty() ? json(nullptr) : read_json_or_null(profile)},
          {"has_trace", !file_inside_run(r, "profile/trace.json").empty()},
          {"checkpoints", cks},
          {"warnings", r.data.warnings}};
}

json compare_json(const std::vector<std::shared_ptr<const IndexedRun>>& runs) {
  std::vector<json> configs;
  json ids = json::array();
  for (const auto& r : runs) {
    configs.push_back(r->data.config);
    ids.push_back(r->id);
  }
  json keys = json::array();
  for (const auto& k : config_key_values(configs))
    keys.push_back({{"key", k.key}, {"values", k.values}, {"differs", k.differs}});
  return {{"runs", ids}, {"keys", keys}};
}

namespace {

// One experiment of a queue as the lab page shows it; null when its files are unreadable (a
// submission being written).
json experiment_json(const fs::path& exp, Ledger& ledger) {
  const json spec = read_json_or_null((exp / "experiment.json").string());
  const json state = read_json_or_null((exp / "state.json").string());
  if (!spec.is_object() || !state.is_object()) return nullptr;
  const std::string st = state.value("state", "queued");
  const double used = ledger.charge(state, spec.value("budget_seconds", 0.0), (exp / "run").string());
  return {{"id", exp.filename().string()},
          {"name", spec.value("name", "")},
          {"state", st},
          {"reason", state.value("reason", "")},
          {"config", spec.value("config", "")},
          {"set", spec.value("set", json::array())},
          {"budget", spec.value("budget", "")},
          {"hypothesis", spec.value("hypothesis", "")},
          {"submitted", spec.value("submitted", "")},
          {"finished", state.value("finished", "")},
          {"device_seconds", used},
          {"journal", read_json_or_null((exp / "journal.json").string())}};
}

json queue_json(const fs::path& q) {
  std::error_code ec;
  std::vector<fs::path> exps;
  for (const auto& e : fs::directory_iterator(q, ec))
    if (e.path().filename().string().starts_with("exp-") && e.is_directory(ec) && !e.is_symlink(ec))
      exps.push_back(e.path());
  std::sort(exps.begin(), exps.end());
  Ledger ledger;
  json list = json::array();
  for (const auto& e : exps)
    if (json j = experiment_json(e, ledger); !j.is_null()) list.push_back(std::move(j));
  const json settings = read_json_or_null((q / "queue.json").string());
  if (settings.is_object() && settings.contains("cap_device_seconds") &&
      settings["cap_device_seconds"].is_number())
    ledger.cap = settings["cap_device_seconds"].get<double>();
  const bool runner = lock_is_held((q / "runner.lock").string());
  return {{"dir", q.string()},
          {"runner", runner ? read_json_or_null((q / "runner.json").string()) : json(nullptr)},
          {"ledger",
           {{"experiments", ledger.experiments},
            {"spent", ledger.spent},
            {"reserved", ledger.reserved},
            {"cap", ledger.capped() ? json(ledger.cap) : json(nullptr)},
            {"remaining", ledger.capped() ? json(ledger.remaining()) : json(nullptr)}}},
          {"experiments", list}};
}

bool is_queue(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / "queue.json", ec)) return true;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().starts_with("exp-") && fs::exists(e.path() / "state.json", ec)) return true;
  return false;
}

}  // namespace

json lab_json(const std::vector<std::string>& roots) {
  json out = json::array();
  std::error_code ec;
  for (const auto& root : roots) {
    std::vector<fs::path> cands{fs::path(root)};
    for (const auto& e : fs::directory_iterator(root, ec))
      if (e.is_directory(ec) && !e.is_symlink(ec)) cands.push_back(e.path());
    for (const auto& c : cands)
      if (is_queue(c)) out.push_back(queue_json(c));
  }
  return out;
}

}  // namespace clm

// The experiment journal (see journal.h). Entries are recomputed from the run files whenever the
// journal is rendered, so an entry whose baseline finished later still gets its comparison.
#include "lab/journal.h"

#include <cmath>
#include <filesystem>

#include "config/config.h"
#include "core/common.h"
#include "report/plot.h"
#include "report/report.h"
#include "report/runs.h"

namespace clm {

namespace fs = std::filesystem;

namespace {

nlohmann::json num(double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); }

double get_num(const nlohmann::json& j, const char* k) {
  return j.is_object() && j.contains(k) && j[k].is_number() ? j[k].get<double>() : NAN;
}

std::string signed_num(double v, int decimals) {
  if (std::isnan(v)) return "-";
  return fmt::format("{}{:.{}f}", v > 0 ? "+" : "", v, decimals);
}

}  // namespace

nlohmann::json journal_entry(ExperimentQueue& q, const Experiment& e) {
  nlohmann::json j = {{"id", e.id},
                      {"name", e.spec.name},
                      {"state", e.status()},
                      {"reason", e.state.value("reason", "")},
                      {"hypothesis", e.spec.hypothesis},
                      {"config", e.spec.config},
                      {"set", e.spec.sets},
                      {"budget", e.spec.budget},
                      {"submitted", e.submitted},
                      {"finished", e.state.value("finished", "")},
                      {"attempts", e.state.contains("attempts") ? e.state["attempts"].size() : 0},
                      {"result", nullptr},
                      {"baseline", nullptr},
                      {"config_diff", nlohmann::json::array()},
                      {"delta", nullptr}};
  const double spent = experiment_device_seconds(e.state, e.run_dir());
  nlohmann::json config;  // the run's resolved config, else the spec resolved now
  if (path_exists(e.run_dir() + "/metrics.jsonl")) {
    try {
      RunData r = load_run(e.run_dir());
      config = r.config;
      j["result"] = {
          {"val_bpb", num(r.val_bpb())}, {"tokens_per_second", num(r.tokens_per_second())},
          {"device_seconds", spent},     {"run_device_seconds", num(r.device_seconds())},
          {"steps", num(r.steps())},     {"tokens", num(r.tokens())},
          {"params", num(r.params())},   {"finished", r.finished()}};
    } catch (const std::exception& err) {
      j["result"] = {{"error", err.what()}, {"device_seconds", spent}};
    }
  }
  if (config.is_null()) {
    try {
      config = to_json(load_config(e.spec.config, e.spec.sets));
    } catch (const std::exception&) {
      // Leaves the diff empty: the submission validated the config, so only a changed file lands
      // here.
    }
  }
  if (e.spec.baseline.empty()) return j;
  nlohmann::json b = {{"ref", e.spec.baseline}};
  try {
    std::string dir = q.resolve_run(e.spec.baseline);
    b["run_dir"] = dir;
    RunData br = load_run(dir, false);
    b["val_bpb"] = num(br.val_bpb());
    b["tokens_per_second"] = num(br.tokens_per_second());
    b["device_seconds"] = num(br.device_seconds());
    b["finished"] = br.finished();
    if (!br.config.is_null() && !config.is_null()) {
      for (const auto& kv : config_key_values({br.config, config}))
        if (kv.differs)
          j["config_diff"].push_back(
              {{"key", kv.key}, {"baseline", kv.values[0]}, {"value", kv.values[1]}});
    }
    const nlohmann::json& res = j["result"];
    double v = get_num(res, "val_bpb"), bv = get_num(b, "val_bpb");
    double t = get_num(res, "tokens_per_second"), bt = get_num(b, "tokens_per_second");
    if (!std::isnan(v) && !std::isnan(bv)) {
      j["delta"] = {{"val_bpb", v - bv},
                    {"tokens_per_second", num(t - bt)},
                    {"tokens_per_second_ratio", bt > 0 ? num(t / bt) : nlohmann::json()},
                    {"device_seconds",
                     num(get_num(res, "run_device_seconds") - get_num(b, "device_seconds"))}};
    }
  } catch (const std::exception& err) {
    b["error"] = err.what();
  }
  j["baseline"] = b;
  return j;
}

void record_journal_entry(ExperimentQueue& q, const Experiment& e) {
  atomic_write(e.dir + "/journal.json", journal_entry(q, e).dump(2) + "\n");
}

static std::string entry_markdown(const nlohmann::json& en) {
  std::string md =
      fmt::format("### {}{} ({})\n\n", en["id"].get<std::string>(),
                  en["name"].get<std::string>().empty() ? "" : " " + en["name"].get<std::string>(),
                  en["state"].get<std::string>());
  std::string hyp = en["hypothesis"].get<std::string>();
  md += fmt::format("**Hypothesis:** {}\n\n", hyp.empty() ? "(none given)" : hyp);
  std::string sets;
  for (const auto& s : en["set"]) sets += fmt::format(" `{}`", s.get<std::string>());
  md += fmt::format("**Config:** `{}`{}{}, budget {}; submitted {}{}.\n\n",
                    en["config"].get<std::string>(), sets.empty() ? "" : " with", sets,
                    en["budget"].get<std::string>(), en["submitted"].get<std::string>(),
                    en["finished"].get<std::string>().empty()
                        ? ""
                        : ", finished " + en["finished"].get<std::string>());
  if (!en["reason"].get<std::string>().empty())
    md += fmt::format("**Reason:** {}\n\n", en["reason"].get<std::string>());
  const auto& r = en["result"];
  if (r.is_object() && !r.contains("error") && r["steps"].is_null()) {
    md += fmt::format("**Result:** no training step recorded ({} device time)\n\n",
                      fmt_seconds(get_num(r, "device_seconds")));
  } else if (r.is_object() && !r.contains("error")) {
    md += fmt::format(
        "**Result:** val bpb {}, {} tokens/s, {} device time over {} attempt(s) ({} steps)\n\n",
        fmt_num(get_num(r, "val_bpb"), 4), fmt_si(get_num(r, "tokens_per_second")),
        fmt_seconds(get_num(r, "device_seconds")), en["attempts"].get<size_t>(),
        fmt_si(get_num(r, "steps"), 0));
  } else if (r.is_object()) {
    md += fmt::format("**Result:** unreadable ({})\n\n", r["error"].get<std::string>());
  }
  const auto& b = en["baseline"];
  if (b.is_object()) {
    if (b.contains("error")) {
      md += fmt::format("**Baseline:** {} (unreadable: {})\n\n", b["ref"].get<std::string>(),
                        b["error"].get<std::string>());
    } else {
      md += fmt::format("**Baseline:** {} (val bpb {})", b["ref"].get<std::string>(),
                        fmt_num(get_num(b, "val_bpb"), 4));
      const auto& d = en["delta"];
      if (d.is_object()) {
        double dv = get_num(d, "val_bpb");
        md += fmt::format(" — **Δ val bpb {}** ({}), tokens/s ×{}", signed_num(dv, 4),
                          dv < 0   ? "better"
                          : dv > 0 ? "worse"
                                   : "same",
                          fmt_num(get_num(d, "tokens_per_second_ratio"), 3));
      }
      md += "\n\n";
      if (!en["config_diff"].empty()) {
        Table t{{"setting", "baseline", "this experiment"}};
        for (const auto& c : en["config_diff"])
          t.push_back({c["key"].get<std::string>(), c["baseline"].get<std::string>(),
                       c["value"].get<std::string>()});
        md += md_table(t) + "\n";
      } else {
        md += "Same configuration as the baseline.\n\n";
      }
    }
  }
  return md;
}

JournalFiles write_journal(ExperimentQueue& q, const std::string& out_in) {
  JournalFiles f;
  if (!q.exists()) fail("no experiment queue at {}", q.dir());
  f.markdown = out_in.empty() ? q.dir() + "/journal.md" : out_in;
  fs::path out(f.markdown);
  if (out.has_parent_path()) make_dirs(out.parent_path().string());
  auto exps = q.list();
  std::vector<RunData> runs;
  PlotSeries pts{"val bpb", {}, {}, false, true}, best{"best so far", {}, {}};
  double best_v = INFINITY;
  for (const auto& e : exps) {
    f.entries.push_back(journal_entry(q, e));
    if (!path_exists(e.run_dir() + "/metrics.jsonl")) continue;
    try {
      RunData r = load_run(e.run_dir());
      r.name = r.dir = e.id;  // the tables show the experiment, not its run folder
      double v = r.finished() ? r.val_bpb() : NAN;
      if (!std::isnan(v)) {
        double x = std::stod(e.id.substr(4));
        pts.x.push_back(x), pts.y.push_back(v);
        best_v = std::min(best_v, v);
        best.x.push_back(x), best.y.push_back(best_v);
      }
      runs.push_back(std::move(r));
    } catch (const std::exception& err) {
      f.notes.push_back(fmt::format("{}: {}", e.id, err.what()));
    }
  }
  std::string md = fmt::format("# Experiment journal: {}\n\nDevice time: {}.\n\n", q.dir(),
                               q.ledger().describe());
  md += "## Leaderboard\n\n";
  if (runs.empty()) {
    md += "No experiment has run yet.\n\n";
  } else {
    md += md_table(leaderboard_table(runs)) + "\n";
    if (!pts.x.empty()) {
      PlotSpec ps{"Validation bits per byte by experiment", "experiment", "val bpb", {pts, best}};
      std::string stem = (out.parent_path() / (out.stem().string() + "-leaderboard")).string();
      PlotResult pr = write_plot(ps, stem);
      f.plots = pr.files;
      if (!pr.note.empty()) f.notes.push_back(pr.note);
      md += fmt::format("![val bpb by experiment]({}-leaderboard.svg)\n\n", out.stem().string());
    }
  }
  md += "## Experiments\n\n";
  if (f.entries.empty()) md += "None submitted yet.\n";
  for (const auto& en : f.entries) md += entry_markdown(en);
  for (const auto& n : f.notes) md += "> note: " + n + "\n\n";
  atomic_write(f.markdown, md);
  return f;
}

}  // namespace clm

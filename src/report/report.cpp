// Run reports, comparisons and leaderboards (see report.h). Markdown is the output format: it reads
// well in a terminal, renders on any code host, and embeds the SVG plots next to it.
#include "report/report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "core/common.h"
#include "core/json_parse.h"
#include "report/plot.h"

namespace clm {

namespace fs = std::filesystem;

// Columns of numbers (cells like "1.67", "19.9M", "1m59s", "-") are right-aligned, text left.
static std::vector<bool> numeric_columns(const Table& t) {
  std::vector<bool> numeric;
  for (const auto& row : t)
    if (numeric.size() < row.size()) numeric.resize(row.size(), true);
  for (size_t r = 1; r < t.size(); ++r)
    for (size_t i = 0; i < t[r].size(); ++i) {
      std::string c = t[r][i];
      if (c.rfind("**", 0) == 0) c = c.substr(2);
      auto digit = [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; };
      bool num = c.empty() || c == "-" || digit(c[0]) || (c.size() > 1 && (c[0] == '-' || c[0] == '.') && digit(c[1]));
      if (!num) numeric[i] = false;
    }
  return numeric;
}

std::string text_table(const Table& t) {
  if (t.empty()) return "";
  std::vector<size_t> w;
  for (const auto& row : t)
    for (size_t i = 0; i < row.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], row[i].size());
    }
  std::vector<bool> numeric = numeric_columns(t);
  std::string out;
  for (size_t r = 0; r < t.size(); ++r) {
    std::string line;
    for (size_t i = 0; i < t[r].size(); ++i) {
      if (!numeric[i]) line += fmt::format("{:<{}}", t[r][i], w[i]);
      else line += fmt::format("{:>{}}", t[r][i], w[i]);
      if (i + 1 < t[r].size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

static std::string md_cell(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '|') o += "\\|";
    else if (c == '\n') o += ' ';
    else o += c;
  }
  return o;
}

std::string md_table(const Table& t) {
  if (t.empty()) return "";
  std::vector<bool> numeric = numeric_columns(t);
  std::string out;
  for (size_t r = 0; r < t.size(); ++r) {
    out += "|";
    for (const auto& c : t[r]) out += " " + md_cell(c) + " |";
    out += "\n";
    if (r == 0) {
      out += "|";
      for (size_t i = 0; i < t[0].size(); ++i) out += numeric[i] ? "---:|" : "---|";
      out += "\n";
    }
  }
  return out;
}

static std::string status_of(const RunData& r) {
  if (r.finished()) return "done";
  return r.metrics.empty() ? "empty" : "unfinished";
}

Table runs_table(const std::vector<RunData>& runs) {
  Table t{{"run", "config", "params", "steps", "tokens", "device time", "tok/s", "val bpb", "CORE", "status"}};
  for (const auto& r : runs)
    t.push_back({r.dir, r.config_name(), fmt_si(r.params()), fmt_si(r.steps(), 0), fmt_si(r.tokens()),
                 fmt_seconds(r.device_seconds()), fmt_si(r.tokens_per_second()), fmt_num(r.val_bpb(), 4),
                 fmt_num(r.core(), 4), status_of(r)});
  return t;
}

std::vector<const RunData*> ranked(const std::vector<RunData>& runs) {
  std::vector<const RunData*> v;
  for (const auto& r : runs) v.push_back(&r);
  std::stable_sort(v.begin(), v.end(), [](const RunData* a, const RunData* b) {
    double x = a->val_bpb(), y = b->val_bpb();
    if (std::isnan(x) != std::isnan(y)) return std::isnan(y);
    if (std::isnan(x)) return false;
    return x < y;
  });
  return v;
}

Table leaderboard_table(const std::vector<RunData>& runs) {
  Table t{{"rank", "run", "config", "val bpb", "CORE", "device time", "tokens", "params", "tok/s", "status"}};
  int rank = 0;
  for (const RunData* r : ranked(runs)) {
    bool has = !std::isnan(r->val_bpb());
    t.push_back({has ? std::to_string(++rank) : "-", r->dir, r->config_name(), fmt_num(r->val_bpb(), 4),
                 fmt_num(r->core(), 4), fmt_seconds(r->device_seconds()), fmt_si(r->tokens()), fmt_si(r->params()),
                 fmt_si(r->tokens_per_second()), status_of(*r)});
  }
  return t;
}

// ---- plots -------------------------------------------------------------------------------

struct Axis {
  std::string key, label;
  double scale = 1;  // divide values by this (seconds -> minutes)
};

static Axis time_axis(const std::vector<const RunData*>& runs) {
  double mx = 0;
  for (auto* r : runs)
    for (auto& [x, y] : r->series("device_seconds", "step")) mx = std::max(mx, x);
  if (mx > 3 * 3600) return {"device_seconds", "device time (h)", 3600};
  if (mx > 300) return {"device_seconds", "device time (min)", 60};
  return {"device_seconds", "device time (s)", 1};
}

// Half-width of the smoothing window: about 2% of the points on each side, at least 2.
static int smoothing_halfwidth(size_t n) { return std::max(2, int(n / 50)); }

static PlotSpec curves(const std::vector<const RunData*>& runs, const Axis& x, const std::string& ykey,
                       const std::string& ylabel, const std::string& title, bool smooth, bool points) {
  PlotSpec p;
  p.title = title;
  p.xlabel = x.label;
  p.ylabel = ylabel;
  int color = 0;
  for (auto* r : runs) {
    auto s = r->series(x.key, ykey);
    PlotSeries raw;
    raw.color = color;
    raw.points = points;
    for (auto& [a, b] : s) raw.x.push_back(a / x.scale), raw.y.push_back(b);
    std::string name = runs.size() > 1 ? r->name : ylabel;
    if (smooth && raw.x.size() > 20) {
      PlotSeries sm = raw;
      sm.y = smooth_centered(raw.y, smoothing_halfwidth(raw.y.size()));
      sm.label = runs.size() > 1 ? name : "smoothed (moving average)";
      if (runs.size() == 1) {
        raw.faint = true;
        raw.label = "every logged step";
        p.series.push_back(raw);
      }
      p.series.push_back(sm);
    } else {
      raw.label = name;
      p.series.push_back(raw);
    }
    ++color;
  }
  return p;
}

static Axis tokens_axis() { return {"tokens", "tokens seen", 1}; }

static void plot_all(const std::vector<const RunData*>& runs, const std::string& dir, ReportFiles& out,
                     std::vector<std::pair<std::string, std::string>>& images) {
  Axis t = time_axis(runs), k = tokens_axis();
  struct P {
    std::string stem, alt;
    PlotSpec spec;
  };
  std::vector<P> plots = {
      {"train_loss_time", "training loss vs device time",
       curves(runs, t, "loss", "train loss (nats/token)", "Training loss vs device time", true, false)},
      {"train_loss_tokens", "training loss vs tokens",
       curves(runs, k, "loss", "train loss (nats/token)", "Training loss vs tokens", true, false)},
      {"val_bpb_time", "validation bpb vs device time",
       curves(runs, t, "val_bpb", "val bpb (bits/byte)", "Validation bits per byte vs device time", false, true)},
      {"val_bpb_tokens", "validation bpb vs tokens",
       curves(runs, k, "val_bpb", "val bpb (bits/byte)", "Validation bits per byte vs tokens", false, true)},
      {"throughput", "tokens per second vs device time",
       curves(runs, t, "tokens_per_second", "tokens/s", "Throughput vs device time", true, false)},
  };
  plots.back().spec.y_from_zero = true;
  std::set<std::string> notes;
  for (auto& p : plots) {
    PlotResult r = write_plot(p.spec, dir + "/" + p.stem);
    for (auto& f : r.files) out.plots.push_back(f);
    if (!r.note.empty()) notes.insert(r.note);
    images.emplace_back(p.stem + ".svg", p.alt);
  }
  for (auto& n : notes) out.notes.push_back(n);
}

// ---- report ------------------------------------------------------------------------------

static std::string machine_text(const nlohmann::json& run) {
  if (!run.is_object() || !run.contains("machine")) return "-";
  const auto& m = run["machine"];
  std::string s = m.value("cpu_model", "?");
  if (m.contains("cores")) s += fmt::format(", {} cores", m["cores"].dump());
  if (m.contains("threads")) s += fmt::format(", {} threads", m["threads"].dump());
  if (m.contains("memory_gb")) s += fmt::format(", {} GB", m["memory_gb"].dump());
  if (m.contains("gpus") && m["gpus"].is_array())
    for (auto& g : m["gpus"]) s += ", " + g.value("name", "GPU");
  return s;
}

static std::string commit_text(const nlohmann::json& run) {
  if (!run.is_object() || !run.contains("git_commit")) return "-";
  std::string c = run["git_commit"].is_string() ? run["git_commit"].get<std::string>() : "?";
  if (c.size() == 40) c = c.substr(0, 12);
  if (run.value("git_dirty", false)) c += " (modified)";
  return c;
}

static std::string str_or(const nlohmann::json& j, const char* key, const std::string& d = "-") {
  if (j.is_object() && j.contains(key)) return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
  return d;
}

static Table results_table(const std::vector<const RunData*>& runs, bool highlight) {
  Table t{{"", }};
  for (auto* r : runs) t[0].push_back(r->name);
  struct Row {
    std::string label;
    std::function<double(const RunData&)> get;
    std::function<std::string(double)> show;
    int better;  // -1 lower is better, +1 higher, 0 none
  };
  std::vector<Row> rows = {
      {"val bpb", [](const RunData& r) { return r.val_bpb(); }, [](double v) { return fmt_num(v, 4); }, -1},
      {"CORE", [](const RunData& r) { return r.core(); }, [](double v) { return fmt_num(v, 4); }, +1},
      {"final train loss", [](const RunData& r) { return r.last_loss(); }, [](double v) { return fmt_num(v, 4); }, 0},
      {"steps", [](const RunData& r) { return r.steps(); }, [](double v) { return fmt_si(v, 0); }, 0},
      {"tokens", [](const RunData& r) { return r.tokens(); }, [](double v) { return fmt_si(v, 2); }, 0},
      {"device time", [](const RunData& r) { return r.device_seconds(); }, [](double v) { return fmt_seconds(v); }, 0},
      {"tokens/s", [](const RunData& r) { return r.tokens_per_second(); }, [](double v) { return fmt_si(v, 1); }, +1},
      {"model GFLOP/s", [](const RunData& r) { return r.model_flops_per_second(); }, [](double v) { return fmt_num(v / 1e9, 1); }, +1},
      {"MFU (median)", [](const RunData& r) { return r.mfu(); }, [](double v) { return std::isnan(v) ? "-" : fmt::format("{:.1f}%", 100 * v); }, +1},
      {"params", [](const RunData& r) { return r.params(); }, [](double v) { return fmt_si(v, 1); }, 0},
  };
  for (auto& row : rows) {
    std::vector<double> v;
    for (auto* r : runs) v.push_back(row.get(*r));
    if (std::all_of(v.begin(), v.end(), [](double x) { return std::isnan(x); })) continue;
    double best = NAN;
    for (double x : v)
      if (!std::isnan(x) && (std::isnan(best) || (row.better < 0 ? x < best : x > best))) best = x;
    std::vector<std::string> line{row.label};
    for (double x : v) {
      std::string s = row.show(x);
      if (highlight && row.better != 0 && runs.size() > 1 && !std::isnan(x) && x == best) s = "**" + s + "**";
      line.push_back(s);
    }
    t.push_back(line);
  }
  return t;
}

ReportFiles write_report(const RunData& run) {
  ReportFiles out;
  std::vector<const RunData*> one{&run};
  std::vector<std::pair<std::string, std::string>> images;
  plot_all(one, run.dir, out, images);
  std::string md = fmt::format("# Run report: {}\n\n", run.name);
  Table info{{"", ""}};
  info.push_back({"directory", run.dir});
  info.push_back({"config", run.config_name()});
  info.push_back({"status", status_of(run)});
  info.push_back({"command", str_or(run.run, "command")});
  info.push_back({"clocklm", str_or(run.run, "version") + ", commit " + commit_text(run.run)});
  info.push_back({"machine", machine_text(run.run)});
  info.push_back({"started", str_or(run.run, "start_time")});
  if (run.run.is_object() && run.run.contains("dataset") && run.run["dataset"].is_object())
    info.push_back({"data", str_or(run.run["dataset"], "dir")});
  else if (run.run.is_object() && run.run.contains("data"))
    info.push_back({"data", str_or(run.run, "data")});
  md += md_table(info) + "\n## Results\n\n" + md_table(results_table(one, false)) + "\n";
  if (run.summary.is_object() && run.summary.contains("bpb_definition"))
    md += "bpb: " + str_or(run.summary, "bpb_definition") + "\n\n";
  for (auto& w : run.warnings) md += "> warning: " + w + "\n\n";
  md += "## Curves\n\n";
  for (auto& [file, alt] : images) md += fmt::format("![{}]({})\n\n", alt, file);
  for (auto& n : out.notes) md += "> note: " + n + "\n\n";
  auto val = run.series("step", "val_bpb");
  if (!val.empty()) {
    Table vt{{"step", "tokens", "device time", "val bpb"}};
    for (const auto& row : run.metrics)
      if (row.contains("val_bpb") && row["val_bpb"].is_number())
        vt.push_back({row["step"].dump(), fmt_si(row.value("tokens", NAN), 2), fmt_seconds(row.value("device_seconds", NAN)),
                      fmt_num(row["val_bpb"].get<double>(), 4)});
    md += "## Validation\n\n" + md_table(vt) + "\n";
  }
  std::string prof = run.dir + "/profile/profile.json";
  if (path_exists(prof)) {
    nlohmann::json pj;
    if (try_parse_json(read_file(prof), pj) && pj.is_object() && pj.contains("ops")) {
      Table pt{{"op", "phase", "ms/step", "share", "GFLOP/s", "GB/s", "%roof", "bound"}};
      int n = 0;
      for (auto& o : pj["ops"]) {
        if (n++ >= 15) break;
        pt.push_back({o.value("name", "?"), o.value("phase", ""), fmt_num(o.value("ms_per_step", NAN), 3),
                      fmt::format("{:.1f}%", 100 * o.value("share", 0.0)), fmt_num(o.value("flops_per_s", 0.0) / 1e9, 1),
                      fmt_num(o.value("bytes_per_s", 0.0) / 1e9, 1),
                      o.value("bound", "").empty() ? "-" : fmt::format("{:.0f}%", 100 * o.value("roof_fraction", 0.0)),
                      o.value("bound", "")});
      }
      md += fmt::format("## Profile\n\n{:.2f} ms/step over {} step(s); trace: profile/trace.json (open in "
                        "https://ui.perfetto.dev or chrome://tracing).\n\n",
                        pj.value("step_seconds", 0.0) * 1e3, pj.value("steps", 0)) +
            md_table(pt) + "\n";
    }
  }
  auto cfg = flatten_json(run.config);
  if (!cfg.empty()) {
    Table ct{{"setting", "value"}};
    for (auto& [k, v] : cfg) ct.push_back({k, v});
    md += "## Configuration\n\n" + md_table(ct) + "\n";
  }
  out.markdown = run.dir + "/report.md";
  atomic_write(out.markdown, md);
  return out;
}

// ---- compare -----------------------------------------------------------------------------

ReportFiles write_compare(const std::vector<RunData>& runs_in, const std::string& dir) {
  if (runs_in.size() < 2) fail("compare needs at least two runs (got {})", runs_in.size());
  make_dirs(dir);
  std::vector<const RunData*> runs;
  for (auto& r : runs_in) runs.push_back(&r);
  ReportFiles out;
  std::vector<std::pair<std::string, std::string>> images;
  plot_all(runs, dir, out, images);
  std::string md = fmt::format("# Comparison of {} runs\n\n", runs.size());
  Table where{{"run", "directory", "config", "commit", "machine", "command"}};
  for (auto* r : runs)
    where.push_back({r->name, r->dir, r->config_name(), commit_text(r->run), machine_text(r->run), str_or(r->run, "command")});
  md += md_table(where) + "\n## Results\n\nBest value in **bold** (lowest val bpb, highest CORE and tokens/s).\n\n";
  md += md_table(results_table(runs, true)) + "\n";
  // Configs: every key of every run; differing ones first and in bold.
  std::vector<nlohmann::json> configs;
  for (auto* r : runs) configs.push_back(r->config);
  Table diff{{"setting"}}, same{{"setting", "value"}};
  for (auto* r : runs) diff[0].push_back(r->name);
  for (auto& kv : config_key_values(configs)) {
    if (kv.differs) {
      // The key in bold, and every value that differs from the first run's.
      std::vector<std::string> line{"**" + kv.key + "**"};
      for (auto& v : kv.values) line.push_back(v == kv.values[0] ? v : "**" + v + "**");
      diff.push_back(line);
    } else {
      same.push_back({kv.key, kv.values[0]});
    }
  }
  md += "## Configuration differences\n\nSettings that differ between the runs; values unlike the first run's in bold.\n\n";
  md += diff.size() > 1 ? md_table(diff) : std::string("The configurations are identical.\n");
  md += "\n## Curves\n\n";
  for (auto& [file, alt] : images) md += fmt::format("![{}]({})\n\n", alt, file);
  for (auto& n : out.notes) md += "> note: " + n + "\n\n";
  if (same.size() > 1)
    md += fmt::format("## Shared settings\n\n<details><summary>{} settings identical in every run</summary>\n\n{}\n</details>\n",
                      same.size() - 1, md_table(same));
  out.markdown = dir + "/compare.md";
  atomic_write(out.markdown, md);
  return out;
}

std::string write_leaderboard(const std::vector<RunData>& runs, const std::string& path, const std::string& title) {
  std::string md = fmt::format("# {}\n\nRanked by final validation bits per byte (lower is better).\n\n", title) +
                   md_table(leaderboard_table(runs));
  atomic_write(path, md);
  return path;
}

}  // namespace clm

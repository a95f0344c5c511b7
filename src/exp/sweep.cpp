// Sweep runner (see sweep.h). Each variant is a separate `clocklm train` process: a crash or a
// diverged run cannot take the sweep down, and every run directory is exactly what a hand-typed
// `clocklm train` would have produced.
#include "exp/sweep.h"

#include <csignal>
#include <filesystem>
#include <map>
#include <set>

#include "core/common.h"
#include "exp/process.h"
#include "exp/report.h"
#include "exp/runinfo.h"
#include "exp/runs.h"

namespace clm {

namespace fs = std::filesystem;

static std::string value_text(const nlohmann::ordered_json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number() || v.is_boolean()) return v.dump();
  fail("{}: values must be strings, numbers or booleans (got {})", where, v.dump());
}

static std::vector<std::string> string_list(const nlohmann::ordered_json& j, const std::string& where) {
  if (!j.is_array()) fail("{} must be a list of strings", where);
  std::vector<std::string> out;
  for (const auto& v : j) {
    if (!v.is_string()) fail("{} must be a list of strings (got {})", where, v.dump());
    out.push_back(v.get<std::string>());
  }
  return out;
}

static void check_set(const std::string& s, const std::string& where) {
  auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0) fail("{}: override '{}' is not key=value", where, s);
}

static std::string sanitize(const std::string& s) {
  std::string o;
  for (char c : s) o += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
  return o;
}

std::string sweep_run_name(const std::vector<std::string>& sets) {
  std::map<std::string, int> last_count;
  auto last = [](const std::string& key) {
    auto d = key.rfind('.');
    return d == std::string::npos ? key : key.substr(d + 1);
  };
  for (const auto& s : sets) last_count[last(s.substr(0, s.find('=')))]++;
  std::string name;
  for (const auto& s : sets) {
    std::string key = s.substr(0, s.find('=')), val = s.substr(s.find('=') + 1);
    if (!name.empty()) name += "-";
    name += sanitize((last_count[last(key)] > 1 ? key : last(key)) + val);
  }
  return name.empty() ? "base" : name;
}

static std::string resolve(const std::string& p, const std::string& base_dir) {
  if (p.empty() || base_dir.empty() || fs::path(p).is_absolute()) return p;
  return (fs::path(base_dir) / p).lexically_normal().string();
}

SweepSpec parse_sweep_spec(const nlohmann::ordered_json& j, const std::string& base_dir, const std::string& default_name) {
  if (!j.is_object()) fail("sweep spec must be a JSON object");
  static const std::set<std::string> known = {"name", "config", "data", "budget", "set",
                                              "grid", "runs", "core", "profile", "args"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key()))
      fail("sweep spec: unknown key '{}' (known: name, config, data, budget, set, runs, grid, core, profile, args)",
           it.key());
  SweepSpec s;
  auto str = [&](const char* k, bool required) {
    if (!j.contains(k)) {
      if (required) fail("sweep spec: missing \"{}\"", k);
      return std::string();
    }
    if (!j[k].is_string() || j[k].get<std::string>().empty()) fail("sweep spec: \"{}\" must be a non-empty string", k);
    return j[k].get<std::string>();
  };
  s.name = j.contains("name") ? str("name", false) : default_name;
  if (s.name.empty()) s.name = "sweep";
  s.config = str("config", true);
  // A preset name stays as is; a path (has a slash or ends in .json) is resolved like data.
  if (s.config.find('/') != std::string::npos || s.config.ends_with(".json")) s.config = resolve(s.config, base_dir);
  s.data = resolve(str("data", true), base_dir);
  s.budget = str("budget", true);
  parse_duration(s.budget);  // throws on a malformed budget
  if (j.contains("core")) s.core = resolve(str("core", false), base_dir);
  if (j.contains("profile")) {
    if (!j["profile"].is_boolean()) fail("sweep spec: \"profile\" must be true or false");
    s.profile = j["profile"].get<bool>();
  }
  if (j.contains("args")) s.args = string_list(j["args"], "sweep spec: \"args\"");
  if (j.contains("set")) s.sets = string_list(j["set"], "sweep spec: \"set\"");
  for (auto& x : s.sets) check_set(x, "sweep spec: \"set\"");

  if (j.contains("runs")) {
    if (!j["runs"].is_array()) fail("sweep spec: \"runs\" must be a list");
    int i = 0;
    for (const auto& r : j["runs"]) {
      std::string where = fmt::format("sweep spec: runs[{}]", i++);
      SweepRun run;
      if (r.is_array()) {
        run.sets = string_list(r, where);
      } else if (r.is_object()) {
        for (auto it = r.begin(); it != r.end(); ++it)
          if (it.key() != "name" && it.key() != "set") fail("{}: unknown key '{}' (known: name, set)", where, it.key());
        if (r.contains("set")) run.sets = string_list(r["set"], where + ".set");
        if (r.contains("name")) {
          if (!r["name"].is_string()) fail("{}.name must be a string", where);
          run.name = r["name"].get<std::string>();
          if (run.name.empty() || sanitize(run.name) != run.name || run.name[0] == '.')
            fail("{}.name '{}' must be a plain folder name (letters, digits, . - _)", where, run.name);
        }
      } else {
        fail("{} must be an object {{\"name\", \"set\"}} or a list of key=value strings", where);
      }
      for (auto& x : run.sets) check_set(x, where);
      if (run.name.empty()) run.name = sweep_run_name(run.sets);
      s.runs.push_back(run);
    }
  }
  if (j.contains("grid")) {
    const auto& g = j["grid"];
    if (!g.is_object() || g.empty()) fail("sweep spec: \"grid\" must be an object of key: [values]");
    std::vector<std::pair<std::string, std::vector<std::string>>> axes;
    for (auto it = g.begin(); it != g.end(); ++it) {
      std::string where = fmt::format("sweep spec: grid[\"{}\"]", it.key());
      if (!it.value().is_array() || it.value().empty()) fail("{} must be a non-empty list of values", where);
      std::vector<std::string> vals;
      for (const auto& v : it.value()) vals.push_back(value_text(v, where));
      axes.emplace_back(it.key(), vals);
    }
    // Cartesian product, first key varying slowest.
    size_t total = 1;
    for (auto& ax : axes) total *= ax.second.size();
    if (total > 1000) fail("sweep spec: the grid has {} points (more than 1000)", total);
    for (size_t n = 0; n < total; ++n) {
      SweepRun run;
      std::vector<size_t> idx(axes.size());
      size_t rem = n;
      for (size_t a = axes.size(); a-- > 0;) idx[a] = rem % axes[a].second.size(), rem /= axes[a].second.size();
      for (size_t a = 0; a < axes.size(); ++a) run.sets.push_back(axes[a].first + "=" + axes[a].second[idx[a]]);
      run.name = sweep_run_name(run.sets);
      s.runs.push_back(run);
    }
  }
  if (s.runs.empty()) s.runs.push_back({"base", {}});
  std::set<std::string> names;
  for (const auto& r : s.runs)
    if (!names.insert(r.name).second) fail("sweep spec: two runs are named '{}'; give them distinct \"name\"s", r.name);
  return s;
}

SweepSpec load_sweep_spec(const std::string& path) {
  if (!path_exists(path)) fail("sweep spec {} does not exist", path);
  auto j = nlohmann::ordered_json::parse(read_file(path), nullptr, false, true);  // comments allowed
  if (j.is_discarded()) fail("{}: malformed JSON", path);
  try {
    return parse_sweep_spec(j, fs::path(path).parent_path().string(), fs::path(path).stem().string());
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

std::vector<std::string> sweep_train_args(const SweepSpec& s, const SweepRun& r, const std::string& run_dir,
                                          bool resume) {
  std::vector<std::string> a = {"train"};
  if (resume) {
    a.insert(a.end(), {"--resume", run_dir});  // config comes from RUN/config.json
  } else {
    a.insert(a.end(), {"--config", s.config});
    for (const auto& x : s.sets) a.insert(a.end(), {"--set", x});
    for (const auto& x : r.sets) a.insert(a.end(), {"--set", x});
    a.insert(a.end(), {"--out", run_dir});
  }
  a.insert(a.end(), {"--data", s.data, "--budget", s.budget});
  if (!s.core.empty()) a.insert(a.end(), {"--core", s.core});
  if (s.profile && !resume) a.push_back("--profile");
  a.insert(a.end(), s.args.begin(), s.args.end());
  return a;
}

static std::string join_cmd(const std::string& exe, const std::vector<std::string>& args) {
  std::vector<std::string> all{exe};
  all.insert(all.end(), args.begin(), args.end());
  return run_record(all)["command"].get<std::string>();
}

int run_sweep(const SweepSpec& spec, const SweepOptions& o, std::FILE* log) {
  std::string out = o.out_dir.empty() ? "sweeps/" + spec.name : o.out_dir;
  std::string exe = o.exe.empty() ? self_exe() : o.exe;
  if (!o.dry_run) make_dirs(out);
  nlohmann::json record = {{"name", spec.name}, {"config", spec.config}, {"data", spec.data},
                           {"budget", spec.budget}, {"set", spec.sets}, {"started", utc_now_iso8601()},
                           {"runs", nlohmann::json::array()}};
  auto save = [&] {
    if (!o.dry_run) atomic_write(out + "/sweep.json", record.dump(2) + "\n");
  };
  int failed = 0;
  for (size_t i = 0; i < spec.runs.size(); ++i) {
    const SweepRun& r = spec.runs[i];
    std::string dir = out + "/" + r.name;
    nlohmann::json rec = {{"name", r.name}, {"set", r.sets}, {"dir", dir}};
    bool done = path_exists(dir + "/summary.json");
    bool resume = !done && path_exists(dir + "/metrics.jsonl");
    auto args = sweep_train_args(spec, r, dir, resume);
    rec["command"] = join_cmd(exe, args);
    std::fprintf(log, "sweep %s: run %zu/%zu %s%s\n", spec.name.c_str(), i + 1, spec.runs.size(), r.name.c_str(),
                 done ? " (finished earlier, skipped)" : resume ? " (resuming)" : "");
    if (o.dry_run || done) {
      if (o.dry_run) std::printf("%s\n", rec["command"].get<std::string>().c_str());
      rec["status"] = done ? "done" : "planned";
      record["runs"].push_back(rec);
      continue;
    }
    std::fprintf(log, "  %s\n", rec["command"].get<std::string>().c_str());
    std::fflush(log);
    double t0 = now_seconds();
    int rc = run_process(exe, args);
    rec["wall_seconds"] = now_seconds() - t0;
    rec["exit_status"] = rc;
    rec["status"] = rc == 0 ? "done" : "failed";
    record["runs"].push_back(rec);
    save();
    if (rc != 0) {
      ++failed;
      std::fprintf(log, "sweep %s: run %s failed (exit status %d)%s\n", spec.name.c_str(), r.name.c_str(), rc,
                   o.keep_going ? "; continuing" : "");
      if (rc == 128 + SIGINT || rc == 128 + SIGTERM) {
        std::fprintf(log, "sweep %s: interrupted; run the same command again to resume\n", spec.name.c_str());
        break;
      }
      if (!o.keep_going) break;
    }
  }
  if (o.dry_run) return 0;
  record["finished"] = utc_now_iso8601();
  record["failed"] = failed;
  save();
  // Comparison and leaderboard over every run of this sweep that left metrics behind.
  std::vector<RunData> runs;
  for (const auto& r : spec.runs) {
    std::string dir = out + "/" + r.name;
    if (!path_exists(dir + "/metrics.jsonl")) continue;
    try {
      runs.push_back(load_run(dir));
    } catch (const Error& e) {
      std::fprintf(log, "sweep %s: cannot read %s: %s\n", spec.name.c_str(), dir.c_str(), e.what());
    }
  }
  if (runs.size() >= 2) {
    ReportFiles f = write_compare(runs, out + "/compare");
    for (auto& n : f.notes) std::fprintf(log, "sweep %s: note: %s\n", spec.name.c_str(), n.c_str());
    std::fprintf(log, "sweep %s: comparison in %s\n", spec.name.c_str(), f.markdown.c_str());
  }
  if (!runs.empty()) {
    write_leaderboard(runs, out + "/leaderboard.md", "Sweep " + spec.name);
    std::printf("%s", text_table(leaderboard_table(runs)).c_str());
    std::fprintf(log, "sweep %s: leaderboard in %s/leaderboard.md\n", spec.name.c_str(), out.c_str());
  }
  return failed;
}

}  // namespace clm

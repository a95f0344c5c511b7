// Sweep specs: parsing and validating the JSON spec into runs (explicit list, then the grid
// product), the folder-safe run names and each run's `clocklm train` arguments. Spec format:
// docs/EXPERIMENTS.md; the runner is sweep.cpp.
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

#include "core/common.h"
#include "core/json_parse.h"
#include "lab/sweep.h"

namespace clm {

namespace fs = std::filesystem;

// A grid larger than this is almost surely a mistake (each point is a whole training run).
constexpr size_t kMaxGridPoints = 1000;

static std::string value_text(const nlohmann::ordered_json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number() || v.is_boolean()) return v.dump();
  fail("{}: values must be strings, numbers or booleans (got {})", where, v.dump());
}

static std::vector<std::string> string_list(const nlohmann::ordered_json& j,
                                            const std::string& where) {
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
  for (char c : s)
    o +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
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
  if (name.empty()) return "base";
  return name[0] == '.' ? "run" + name : name;  // never "." or "..": it names a folder
}

static std::string resolve(const std::string& p, const std::string& base_dir) {
  if (p.empty() || base_dir.empty() || fs::path(p).is_absolute()) return p;
  return (fs::path(base_dir) / p).lexically_normal().string();
}

SweepSpec parse_sweep_spec(const nlohmann::ordered_json& j, const std::string& base_dir,
                           const std::string& default_name) {
  if (!j.is_object()) fail("sweep spec must be a JSON object");
  static const std::set<std::string> known = {"name", "config", "data", "budget",  "set",
                                              "grid", "runs",   "core", "profile", "args"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key()))
      fail(
          "sweep spec: unknown key '{}' (known: name, config, data, budget, set, runs, grid, core, "
          "profile, args)",
          it.key());
  SweepSpec s;
  auto str = [&](const char* k, bool required) {
    if (!j.contains(k)) {
      if (required) fail("sweep spec: missing \"{}\"", k);
      return std::string();
    }
    if (!j[k].is_string() || j[k].get<std::string>().empty())
      fail("sweep spec: \"{}\" must be a non-empty string", k);
    return j[k].get<std::string>();
  };
  s.name = j.contains("name") ? str("name", false) : sanitize(default_name);
  // The name becomes the default sweep folder (sweeps/<name>), so it must stay a plain name.
  if (s.name.empty()) s.name = "sweep";
  if (sanitize(s.name) != s.name || s.name[0] == '.')
    fail("sweep spec: \"name\" '{}' must be a plain folder name (letters, digits, . - _)", s.name);
  s.config = str("config", true);
  // A preset name stays as is; a path (has a slash or ends in .json) is resolved like data.
  if (s.config.find('/') != std::string::npos || s.config.ends_with(".json"))
    s.config = resolve(s.config, base_dir);
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
          if (it.key() != "name" && it.key() != "set")
            fail("{}: unknown key '{}' (known: name, set)", where, it.key());
        if (r.contains("set")) run.sets = string_list(r["set"], where + ".set");
        if (r.contains("name")) {
          if (!r["name"].is_string()) fail("{}.name must be a string", where);
          run.name = r["name"].get<std::string>();
          if (run.name.empty() || sanitize(run.name) != run.name || run.name[0] == '.')
            fail("{}.name '{}' must be a plain folder name (letters, digits, . - _)", where,
                 run.name);
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
    if (!g.is_object() || g.empty())
      fail("sweep spec: \"grid\" must be an object of key: [values]");
    std::vector<std::pair<std::string, std::vector<std::string>>> axes;
    size_t total = 1;  // checked as it grows: a product of many axes could wrap around
    for (auto it = g.begin(); it != g.end(); ++it) {
      std::string where = fmt::format("sweep spec: grid[\"{}\"]", it.key());
      if (it.key().empty() || it.key().find('=') != std::string::npos)
        fail("{}: not a config key", where);
      if (!it.value().is_array() || it.value().empty())
        fail("{} must be a non-empty list of values", where);
      std::vector<std::string> vals;
      for (const auto& v : it.value()) vals.push_back(value_text(v, where));
      total *= vals.size();
      if (total > kMaxGridPoints)
        fail("sweep spec: the grid has more than {} points", kMaxGridPoints);
      axes.emplace_back(it.key(), vals);
    }
    // Cartesian product, first key varying slowest.
    for (size_t n = 0; n < total; ++n) {
      SweepRun run;
      std::vector<size_t> idx(axes.size());
      size_t rem = n;
      for (size_t a = axes.size(); a-- > 0;)
        idx[a] = rem % axes[a].second.size(), rem /= axes[a].second.size();
      for (size_t a = 0; a < axes.size(); ++a)
        run.sets.push_back(axes[a].first + "=" + axes[a].second[idx[a]]);
      run.name = sweep_run_name(run.sets);
      s.runs.push_back(run);
    }
  }
  if (s.runs.empty()) s.runs.push_back({"base", {}});
  std::set<std::string> names;
  for (const auto& r : s.runs)
    if (!names.insert(r.name).second)
      fail("sweep spec: two runs are named '{}'; give them distinct \"name\"s", r.name);
  return s;
}

SweepSpec parse_sweep_spec_text(std::string_view text, const std::string& path) {
  auto j = parse_ordered_json(text, path, {.allow_comments = true});
  try {
    return parse_sweep_spec(j, fs::path(path).parent_path().string(),
                            fs::path(path).stem().string());
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

SweepSpec load_sweep_spec(const std::string& path) {
  if (!path_exists(path)) fail("sweep spec {} does not exist", path);
  return parse_sweep_spec_text(read_file(path), path);
}

std::vector<std::string> sweep_train_args(const SweepSpec& s, const SweepRun& r,
                                          const std::string& run_dir, bool resume) {
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

}  // namespace clm

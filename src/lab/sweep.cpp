// Sweep runner (see sweep.h). Each variant is a separate `clocklm train` process: a crash or a
// diverged run cannot take the sweep down, and every run directory is exactly what a hand-typed
// `clocklm train` would have produced.
#include "lab/sweep.h"

#include <csignal>
#include <filesystem>

#include "core/common.h"
#include "lab/process.h"
#include "profile/runinfo.h"
#include "report/report.h"
#include "report/runs.h"

namespace clm {

namespace fs = std::filesystem;

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

// Subcommands of the experiment environment: roofline, profile, runs, report, compare,
// leaderboard, sweep and plan. Each callback is a thin layer over a function in src/report/,
// src/profile/, src/plan/ or src/lab/.
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/common.h"
#include "lab/sweep.h"
#include "plan/plan.h"
#include "profile/profile_report.h"
#include "profile/profile_run.h"
#include "profile/roofline.h"
#include "report/report.h"
#include "report/runs.h"

namespace clm {

static void register_roofline(CLI::App& app) {
  auto* cmd = app.add_subcommand("roofline", "Measure (or show the cached) matmul and memory roofline of this machine");
  struct Opts {
    bool json = false, refresh = false;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_flag("--json", o->json, "Print the roofline as JSON");
  cmd->add_flag("--refresh", o->refresh, "Measure again even if a cached result exists");
  cmd->add_option("--threads", o->threads, "Threads to measure with (default: all)");
  cmd->callback([o] {
    auto& [json, refresh, threads] = *o;
    Roofline r = machine_roofline(refresh, threads, json ? nullptr : stderr);
    if (json) {
      auto j = to_json(r);
      j["cache"] = roofline_cache_path(threads);
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::printf("device          %s (%s), %d threads\n", r.device.c_str(), r.cpu_model.c_str(), r.threads);
    std::printf("fp32 matmul     %8.1f GFLOP/s  (oneDNN, %d^3)\n", r.fp32_flops / 1e9, r.matmul_size);
    if (r.bf16_flops > 0)
      std::printf("bf16 matmul     %8.1f GFLOP/s  (oneDNN, bf16 in, fp32 out)\n", r.bf16_flops / 1e9);
    else
      std::printf("bf16 matmul         none       (oneDNN has no bf16 matmul on this CPU; bf16 runs widened to fp32)\n");
    std::printf("memory copy     %8.1f GB/s     (%.0f MB arrays)\n", r.copy_bytes_per_s / 1e9, r.array_mb);
    std::printf("memory triad    %8.1f GB/s\n", r.triad_bytes_per_s / 1e9);
    std::printf("ridge point     %8.1f FLOP/byte (the faster matmul / bandwidth); fp32: %.1f\n", r.ridge(true), r.ridge(false));
    std::printf("measured        %s; cached in %s\n", r.measured_at.c_str(), roofline_cache_path(threads).c_str());
  });
}

static void register_profile(CLI::App& app) {
  auto* cmd = app.add_subcommand("profile", "Time every op of N training steps (synthetic tokens) against this machine's roofline");
  struct Opts {
    ProfileRunOptions po;
    std::string out;
    int top = 30;
    bool fp32 = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--config", o->po.config, "Preset name or JSON config file")->required();
  cmd->add_option("--set", o->po.sets, "Override a config key: key=value (repeatable)");
  cmd->add_option("--steps", o->po.steps, "Profiled training steps")->capture_default_str();
  cmd->add_option("--warmup", o->po.warmup, "Unprofiled steps first")->capture_default_str();
  cmd->add_option("--batch", o->po.batch, "Rows per step (default: train.micro_batch)");
  cmd->add_option("--seq", o->po.seq, "Sequence length (default: model.seq_len)");
  cmd->add_option("--vocab", o->po.default_vocab, "Vocabulary size when the config leaves it to the dataset")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "Folder for profile.json, trace.json and profile.txt")->required();
  cmd->add_option("--top", o->top, "Rows of the printed table")->capture_default_str();
  cmd->add_option("--device", o->po.device, "Backend: cpu | cuda[:N] | auto")->capture_default_str();
  cmd->add_flag("--fp32-roof", o->fp32, "Judge ops against the fp32 matmul peak instead of bf16");
  cmd->callback([o] {
    ProfileRunResult r = profile_training_steps(o->po);
    Roofline roof = machine_roofline(false, r.threads, stderr);
    ProfileSummary s = analyze_profile(r.prof, r.measured_seconds, o->po.steps, roof, !o->fp32);
    make_dirs(o->out);
    atomic_write(o->out + "/profile.json", profile_json(s).dump(2) + "\n");
    atomic_write(o->out + "/trace.json", chrome_trace(r.prof).dump() + "\n");
    atomic_write(o->out + "/profile.txt", format_profile_table(s, 1000));
    double step_s = r.measured_seconds / o->po.steps;
    std::printf("%s: B=%d T=%d, %d threads, %.1f tokens/s, %.1f model GFLOP/s (%.1f%% of the %s roof)\n",
                r.config_name.c_str(), r.B, r.T, r.threads, r.tokens_per_step / step_s,
                r.tokens_per_step * r.flops_per_token / step_s / 1e9,
                100 * r.tokens_per_step * r.flops_per_token / step_s / s.peak_flops(), o->fp32 ? "fp32" : "bf16");
    std::printf("device: %s\n", r.device.c_str());
    std::printf("%s", format_profile_table(s, o->top).c_str());
    std::printf("wrote %s/profile.json, %s/trace.json (open in https://ui.perfetto.dev), %s/profile.txt\n",
                o->out.c_str(), o->out.c_str(), o->out.c_str());
  });
}

static void print_notes(const ReportFiles& f) {
  for (const auto& n : f.notes) std::fprintf(stderr, "clocklm: note: %s\n", n.c_str());
}

// The runs under `dir` (unreadable ones are reported and skipped); an error if there are none.
static std::vector<RunData> load_runs_or_fail(const std::string& dir) {
  std::vector<std::string> errors;
  auto runs = load_runs(dir, &errors);
  for (auto& e : errors) std::fprintf(stderr, "clocklm: warning: skipped %s\n", e.c_str());
  if (runs.empty()) fail("no training runs (folders with summary.json or metrics.jsonl) under {}", dir);
  return runs;
}

static void register_runs(CLI::App& app) {
  auto* cmd = app.add_subcommand("runs", "List the training runs under a folder with their key numbers");
  struct Opts {
    std::string dir = ".";
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("dir", o->dir, "Folder holding run directories (searched 3 levels deep)");
  cmd->add_flag("--json", o->json, "Print one JSON object per run instead of a table");
  cmd->callback([o] {
    auto runs = load_runs_or_fail(o->dir);
    if (o->json) {
      for (auto& r : runs) {
        nlohmann::json j = {{"run", r.dir}, {"config", r.config_name()}, {"finished", r.finished()}};
        auto put = [&](const char* k, double v) { j[k] = std::isnan(v) ? nlohmann::json() : nlohmann::json(v); };
        put("params", r.params());
        put("steps", r.steps());
        put("tokens", r.tokens());
        put("device_seconds", r.device_seconds());
        put("tokens_per_second", r.tokens_per_second());
        put("val_bpb", r.val_bpb());
        put("core", r.core());
        std::printf("%s\n", j.dump().c_str());
      }
      return;
    }
    std::printf("%s", text_table(runs_table(runs)).c_str());
  });
}

static void register_report(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "Write RUN/report.md with plots (loss, val bpb, throughput) as SVG and PNG");
  auto run = std::make_shared<std::string>();
  cmd->add_option("run", *run, "Run directory (written by clocklm train --out)")->required();
  cmd->callback([run] {
    RunData r = load_run(*run);
    for (auto& w : r.warnings) std::fprintf(stderr, "clocklm: warning: %s\n", w.c_str());
    ReportFiles f = write_report(r);
    print_notes(f);
    std::printf("wrote %s and %zu plot files\n", f.markdown.c_str(), f.plots.size());
  });
}

static void register_compare(CLI::App& app) {
  auto* cmd = app.add_subcommand("compare", "Compare runs side by side: configs (differences in bold), results, overlaid curves");
  struct Opts {
    std::vector<std::string> runs;
    std::string out = "compare";
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("runs", o->runs, "Two or more run directories")->required();
  cmd->add_option("--out", o->out, "Folder for compare.md and the plots")->capture_default_str();
  cmd->callback([o] {
    std::vector<RunData> runs;
    for (auto& d : o->runs) runs.push_back(load_run(d));
    ReportFiles f = write_compare(runs, o->out);
    print_notes(f);
    std::printf("%s", text_table(leaderboard_table(runs)).c_str());
    std::printf("wrote %s and %zu plot files\n", f.markdown.c_str(), f.plots.size());
  });
}

static void register_leaderboard(CLI::App& app) {
  auto* cmd = app.add_subcommand("leaderboard", "Rank the runs under a folder by final val bpb (with CORE where present)");
  struct Opts {
    std::string dir = ".", md;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("dir", o->dir, "Folder holding run directories");
  cmd->add_option("--md", o->md, "Also write the leaderboard as markdown to this file");
  cmd->add_flag("--json", o->json, "Print the ranking as a JSON array");
  cmd->callback([o] {
    auto runs = load_runs_or_fail(o->dir);
    if (o->json) {
      nlohmann::json arr = nlohmann::json::array();
      int rank = 0;
      for (const RunData* r : ranked(runs)) {
        auto nn = [](double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); };
        arr.push_back({{"rank", std::isnan(r->val_bpb()) ? nlohmann::json() : nlohmann::json(++rank)},
                       {"run", r->dir}, {"config", r->config_name()}, {"val_bpb", nn(r->val_bpb())},
                       {"core", nn(r->core())}, {"device_seconds", nn(r->device_seconds())},
                       {"tokens", nn(r->tokens())}, {"finished", r->finished()}});
      }
      std::printf("%s\n", arr.dump(2).c_str());
    } else {
      std::printf("%s", text_table(leaderboard_table(runs)).c_str());
    }
    if (!o->md.empty()) write_leaderboard(runs, o->md, "Leaderboard: " + o->dir);
  });
}

static void register_sweep(CLI::App& app) {
  auto* cmd = app.add_subcommand("sweep", "Train a list or grid of config overrides (same data and budget), then compare and rank them");
  struct Opts {
    std::string spec;
    SweepOptions so;
    bool stop = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("spec", o->spec, "Sweep spec (JSON; see docs/EXPERIMENTS.md)")->required();
  cmd->add_option("--out", o->so.out_dir, "Sweep folder (default: sweeps/<name>)");
  cmd->add_flag("--dry-run", o->so.dry_run, "Print the train commands without running them");
  cmd->add_flag("--stop-on-failure", o->stop, "Stop at the first failed run (default: keep going)");
  cmd->add_option("--exe", o->so.exe, "clocklm executable to run (default: this one)");
  cmd->callback([o] {
    SweepSpec spec = load_sweep_spec(o->spec);
    o->so.keep_going = !o->stop;
    int failed = run_sweep(spec, o->so);
    if (failed > 0) fail("sweep {}: {} of {} runs failed (see sweep.json)", spec.name, failed, spec.runs.size());
  });
}

static void register_plan(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan", "Pick the config (a d<N> depth, a preset or a preset's recipe at another depth) with the lowest "
              "predicted val bpb for a budget on this device");
  struct Opts {
    PlanOptions p;
    std::string budget, out = "plan.json";
    bool json = false, fit_only = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--budget", o->budget, "Device-time budget, e.g. 600, 10m, 1.5h")->required();
  cmd->add_option("--data", o->p.data_dir, "Prepared dataset (vocabulary, bytes per token; default vocab 8192)");
  cmd->add_option("--device", o->p.device, "Backend to time candidates on: cpu | cuda[:N] | auto");
  cmd->add_option("--runs", o->p.runs,
                  "Fit the scaling law to the finished runs under these folders, or to the points in these "
                  "JSONL files (repeatable)");
  cmd->add_option("--set", o->p.sets, "Override applied to every candidate: key=value (repeatable)");
  cmd->add_option("--min-depth", o->p.min_depth, "Smallest depth of the d<N> rule searched (default 2)");
  cmd->add_option("--max-depth", o->p.max_depth, "Largest depth searched (default 12)");
  cmd->add_flag("--no-presets{false}", o->p.presets, "Search only the depths of the d<N> rule, not the presets too");
  cmd->add_option("--variant-reach", o->p.variant_reach,
                  "Each preset's recipe is also tried this many layers deeper and shallower (default 2; 0: none)")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--measure", o->p.measure_top, "Candidates timed on the device (default 3; the rest estimated)");
  cmd->add_option("--threads", o->p.threads, "CPU threads (default: all)");
  cmd->add_option("--out", o->out, "Write the best candidate's config here (default plan.json)");
  cmd->add_flag("--json", o->json, "Print the whole plan as JSON");
  cmd->add_flag("--fit-only", o->fit_only, "Only fit the law to --runs and print it (no timing, no file)");
  cmd->callback([o] {
    if (o->fit_only) {
      if (o->p.runs.empty()) fail("plan --fit-only needs --runs DIR");
      const std::vector<LawPoint> pts = law_points_from_runs(o->p.runs);
      const RecipeModel m = fit_recipe_model_to_runs(pts, recipe_family(depth_config(4)));
      nlohmann::json j = m.law.to_json();
      j["families"] = m.to_json()["families"];
      j["fitted_points"] = nlohmann::json::array();  // one line each of them is a points file
      for (const LawPoint& p : pts) j["fitted_points"].push_back(law_point_json(p));
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    o->p.budget_seconds = parse_duration(o->budget);
    o->p.progress = !o->json;
    PlanResult r = make_plan(o->p);
    const RunConfig& best = r.ranked.front().cfg;
    atomic_write(o->out, to_json(best).dump(2) + "\n");
    if (o->json) {
      nlohmann::json j = r.to_json();
      j["config_file"] = o->out;
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::printf("%s", format_plan(r).c_str());
    std::printf("best: %s, predicted val bpb %.4f; config written to %s (train --config %s)\n", best.name.c_str(),
                r.ranked.front().predicted_bpb, o->out.c_str(), o->out.c_str());
  });
}

void register_exp_commands(CLI::App& app) {
  register_roofline(app);
  register_profile(app);
  register_runs(app);
  register_report(app);
  register_compare(app);
  register_leaderboard(app);
  register_sweep(app);
  register_plan(app);
}

}  // namespace clm

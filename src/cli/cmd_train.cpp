// The model and training subcommands: `model` (parameter count and FLOPs of a config) and `train` (the
// budgeted training loop, src/train/).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/common.h"
#include "config/config.h"
#include "backend/backend.h"
#include "dist/launch.h"
#include "plan/plan.h"
#include "lab/train_hooks.h"
#include "model/gpt.h"
#include "train/trainer.h"

namespace clm {

namespace {

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), out;
  int n = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (n && n % 3 == 0 && *it != '-') out.push_back(',');
    out.push_back(*it);
    ++n;
  }
  return {out.rbegin(), out.rend()};
}

// `train --config auto`: plans first (as `clocklm plan` does, for this budget, data, device and
// overrides), keeps the plan in RUN/plan.json and the winner's config in RUN/auto.json, and returns
// that config's path for the trainer.
std::string plan_auto_config(const TrainOptions& o, double budget_seconds) {
  if (!o.resume_dir.empty())
    fail("train: --config auto starts a new run; --resume continues with RUN/config.json");
  if (o.out_dir.empty()) fail("train: --config auto needs --out RUN (the plan is kept there)");
  if (const char* w = std::getenv("OMPI_COMM_WORLD_SIZE"); w && std::atoi(w) > 1)
    fail("train: --config auto plans in one process; run `clocklm plan` first and give every rank "
         "its config file");
  PlanOptions p;
  p.budget_seconds = budget_seconds > 0 ? budget_seconds : TrainConfig{}.budget_seconds;
  p.data_dir = o.data_dir;
  p.device = o.device;
  p.sets = o.sets;
  p.progress = !o.quiet;
  const PlanResult r = make_plan(p);
  if (!o.quiet) std::fprintf(stderr, "%s", format_plan(r).c_str());
  make_dirs(o.out_dir);
  const std::string plan = o.out_dir + "/plan.json", cfg = o.out_dir + "/auto.json";
  atomic_write(plan, r.to_json().dump(2) + "\n");
  atomic_write(cfg, to_json(r.ranked.front().cfg).dump(2) + "\n");
  std::fprintf(stderr, "train: --config auto chose %s (predicted val bpb %.4f); plan in %s\n",
               r.ranked.front().cfg.name.c_str(), r.ranked.front().predicted_bpb, plan.c_str());
  return cfg;
}

// The process's own command line (for run.json): /proc/self/cmdline, NUL-separated.
std::vector<std::string> own_argv() {
  std::vector<std::string> argv;
  std::string s;
  try {
    s = read_file("/proc/self/cmdline");
  } catch (const Error&) {
    return argv;
  }
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == '\0') {
      argv.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return argv;
}

}  // namespace

void register_train_commands(CLI::App& app) {
  // ---- model ----
  {
    auto* cmd = app.add_subcommand("model", "Print a config's parameter count (by group) and FLOPs per token");
    auto config = std::make_shared<std::string>();
    auto sets = std::make_shared<std::vector<std::string>>();
    auto json_out = std::make_shared<bool>(false);
    auto depth = std::make_shared<int>(0);
    auto write = std::make_shared<std::string>();
    auto* cfg_opt = cmd->add_option("--config", *config, "Preset name or JSON config file");
    auto* depth_opt =
        cmd->add_option("--depth", *depth, "The d<N> rule at this depth (any N >= 1; presets are d4..d20)");
    cfg_opt->excludes(depth_opt);
    cmd->add_option("--set", *sets, "Override a config key: key=value (repeatable)");
    cmd->add_flag("--json", *json_out, "Print the resolved config as JSON as well");
    cmd->add_option("--write", *write, "Write the resolved config to this file (a config `train --config` takes)");
    cmd->callback([config, sets, json_out, depth, write] {
      if (config->empty() && *depth == 0) fail("model: give --config NAME|FILE or --depth N");
      RunConfig c;
      if (*depth != 0) {
        c = depth_config(*depth);
        apply_overrides(c, *sets);
        validate(c);
      } else {
        c = load_config(*config, *sets);
      }
      if (!write->empty()) atomic_write(*write, to_json(c).dump(2) + "\n");
      const ModelConfig& m = c.model;
      ParamCount p = count_params(m);
      if (m.vocab_size == 0)
        std::printf("note: vocab_size 0 (taken from the dataset's tokenizer); counts below exclude embed/head\n");
      std::printf("config: %s\n", c.name.c_str());
      std::printf("model: %d layers x d_model %d, %d heads (%d kv) x head_dim %d, mlp %s x%.3g, vocab %d (padded %d), "
                  "seq %d, %s embeddings\n",
                  m.n_layer, m.d_model, m.n_head, m.n_kv_head, m.head_dim, m.activation.c_str(), m.mlp_ratio,
                  m.vocab_size, m.padded_vocab(), m.seq_len, m.tie_embeddings ? "tied" : "untied");
      std::printf("parameters: %s total\n", with_commas(p.total()).c_str());
      std::printf("  matrix (%s): %s\n", c.optim.matrix.kind.c_str(), with_commas(p.matrix).c_str());
      std::printf("  embed  (%s): %s\n", c.optim.embed.kind.c_str(), with_commas(p.embed).c_str());
      std::printf("  head   (%s): %s\n", c.optim.head.kind.c_str(), with_commas(p.head).c_str());
      std::printf("  scalar (%s): %s\n", c.optim.scalar.kind.c_str(), with_commas(p.scalar).c_str());
      double f = flops_per_token(m, m.seq_len);
      std::printf("training FLOPs per token (T=%d): %.10g (%.3f GFLOP)\n", m.seq_len, f, f / 1e9);
      std::printf("training FLOPs per step (%lld tokens): %.4g\n", (long long)c.train.batch_tokens,
                  f * double(c.train.batch_tokens));
      if (m.vocab_size > 0) {
        // What one rank allocates to train it (as the trainer's memory check counts it): model,
        // gradients, bf16 mirror and activations for one micro-batch, plus the optimizer moments
        // and the micro-batch gradient sum.
        std::shared_ptr<Backend> be = make_backend("cpu");
        const double bytes = double(GPT::memory_need(m, c.train.micro_batch, m.seq_len, *be)) + 12.0 * double(p.total());
        std::printf("training memory per rank (micro_batch %d x seq_len %d, %s matmuls): %.2f GiB\n",
                    c.train.micro_batch, m.seq_len, prec_name(resolve_precision(m.matmul_precision, *be)),
                    bytes / double(1 << 30));
      }
      if (*json_out) std::printf("%s\n", to_json(c).dump(2).c_str());
    });
  }
  // ---- train ----
  {
    auto* cmd = app.add_subcommand("train", "Train a model from scratch within a device-time budget");
    auto o = std::make_shared<TrainOptions>();
    auto budget = std::make_shared<std::string>();
    auto nproc = std::make_shared<int>(1);
    cmd->add_option("--config", o->config, "Preset name, JSON config file, or auto (the best d<N> for the budget, as `clocklm plan` picks it; default with --resume: RUN/config.json)");
    cmd->add_option("--set", o->sets, "Override a config key: key=value (repeatable)");
    cmd->add_option("--data", o->data_dir, "Prepared dataset folder (from `clocklm prepare`)")->required();
    cmd->add_option("--budget", *budget, "Device-time budget, e.g. 600, 90s, 10m, 1.5h (default: train.budget_seconds)");
    cmd->add_option("--out", o->out_dir, "Run directory to create (RUN)");
    cmd->add_option("--resume", o->resume_dir, "Continue the run in RUN from its latest checkpoint");
    cmd->add_flag("--profile", o->profile, "Profile three steps into RUN/profile/");
    cmd->add_option("--core", o->core_bundle, "Also score CORE at the end with this bundle folder");
    cmd->add_option("--stop-after-steps", o->stop_after_steps,
                    "Checkpoint and stop after this many steps of this session (to test or split a run)");
    cmd->add_flag("--quiet", o->quiet, "No live progress line");
    cmd->add_option("--device", o->device, "Backend: cpu | cuda[:N] | auto (the best present; default)");
    cmd->add_option("--nproc", *nproc,
                    "Data-parallel ranks on this host (started through mpirun; threads are divided among them)");
    cmd->callback([o, budget, nproc] {
      if (*nproc != 1) exec_local_ranks(*nproc, own_argv());
      TrainOptions opt = *o;
      if (!budget->empty()) opt.budget_seconds = parse_duration(*budget);
      if (opt.config == "auto") opt.config = plan_auto_config(opt, opt.budget_seconds);
      opt.argv = own_argv();
      opt.hooks = standard_train_hooks();
      TrainResult r = train(opt);
      if (r.rank != 0) return;  // rank 0 reports for the job
      if (r.finished) {
        std::printf("val_bpb %.6f\n", r.val_bpb);
      } else {
        std::printf("stopped at step %lld; resume with --resume %s\n", (long long)r.steps,
                    (opt.out_dir.empty() ? opt.resume_dir : opt.out_dir).c_str());
      }
      std::fflush(stdout);
    });
  }
}

}  // namespace clm

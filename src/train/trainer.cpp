// `train` (see trainer.h and docs/TRAINING.md) in four phases: open the run (run_context.h: options,
// resume decision, config, run folder), build what the steps run on (train_setup.h) and start or
// restore the TrainState (train_state.h) with config.json and run.json, run the loop (train_loop.h),
// and finish (last checkpoint, final evaluation, summary.json).
#include "train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "core/common.h"
#include "eval/combined_score.h"
#include "eval/core.h"
#include "train/run_context.h"
#include "train/run_dir.h"
#include "train/train_loop.h"
#include "train/train_setup.h"
#include "train/train_state.h"

namespace clm {

namespace fs = std::filesystem;

namespace {

// `.NAME.tmp.PID`: atomic_write's temp file (core/common.h). Only that exact shape is clocklm's, so a
// user's file that merely contains ".tmp." is left alone.
bool is_atomic_write_temp(const std::string& name) {
  const size_t at = name.rfind(".tmp.");
  if (!name.starts_with(".") || at == std::string::npos || at == 0 || at + 5 == name.size()) return false;
  return name.find_first_not_of("0123456789", at + 5) == std::string::npos;
}

// After a crash the run folder may hold what a killed process left: temp files of writes that never
// finished, and checkpoints newer than the one `latest` names (written, but killed before `latest`
// moved). The lock guarantees no other process is writing here, so both are removed; the remaining
// checkpoints are returned oldest first, so keep_checkpoints goes on counting them.
std::vector<std::string> tidy_checkpoints(const std::string& run_dir, int64_t resumed_step) {
  std::vector<std::pair<int64_t, std::string>> found;
  for (const fs::path& dir : {fs::path(run_dir), fs::path(run_dir) / "checkpoints"}) {
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      std::error_code ec;
      if (is_atomic_write_temp(name)) {
        fs::remove(e.path(), ec);
        continue;
      }
      if (dir == fs::path(run_dir) || !name.starts_with("step_") || !name.ends_with(".ckpt")) continue;
      const std::string digits = name.substr(5, name.size() - 10);
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      const int64_t step = std::stoll(digits);
      if (step > resumed_step) fs::remove(e.path(), ec);
      else found.push_back({step, name});
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> kept;
  for (auto& f : found) kept.push_back(f.second);
  return kept;
}

// ---- phase 2: build the model, optimizer and loader; restore or start the state ----

TrainSetup build(const RunContext& run) {
  const TrainConfig& tc = run.tc();
  const int model_batch = std::max(run.micro_batch, run.eval_batch);
  check_fits_memory(*run.device,
                    training_memory_bytes(run.cfg.model, model_batch, run.seq_len, *run.device,
                                          tc.batch_tokens > run.rank_tokens),
                    fmt::format("training {} (micro-batch {} x seq_len {})", run.cfg.name, run.micro_batch,
                                run.seq_len));
  TrainSetupOptions so;
  so.batch = model_batch;
  so.seq_len = run.seq_len;
  so.seed = tc.seed;
  so.comm = run.comm;
  so.loader = train_loader_options(run);
  return build_train_setup(run.cfg, *run.device, so);
}

// This rank's data position in a checkpoint: its own, or with another number of ranks the rows
// read so far dealt anew (DataLoader::resplit_state), so the run reads the same data either way.
nlohmann::json rank_loader_position(const RunContext& run, const TrainState& saved, const std::string& path) {
  if (saved.world == run.world) return saved.loaders.at(size_t(run.rank));
  nlohmann::json position;
  try {
    position = DataLoader::resplit_state(saved.loaders, run.world, run.micro_batch);
  } catch (const Error& e) {
    fail("{} was written by a run of {} rank(s) and this job has {}: {}; resume with {} rank(s)", path, saved.world,
         run.world, e.what(), saved.world);
  }
  if (!run.quiet)
    std::fprintf(stderr, "train: %s was written by %d rank(s); continuing with %d, the same rows dealt anew\n",
                 path.c_str(), saved.world, run.world);
  return position;
}

// The state of a new run, or the one in the run's latest checkpoint (whose weights, optimizer
// state and data position are restored into `setup`).
TrainState start_or_restore(const RunContext& run, TrainSetup& setup) {
  TrainState fresh;
  fresh.clock.budget = run.tc().budget_seconds;
  fresh.next_eval_at = run.tc().eval_every_seconds;
  fresh.next_ckpt_at = run.tc().checkpoint_every_seconds;
  fresh.world = run.world;
  fresh.tokenizer_hash = run.info.tokenizer_hash;
  if (!run.resuming) return fresh;

  const std::string path = latest_checkpoint(run.dir);
  const nlohmann::json meta = load_checkpoint(path, run.cfg, *setup.model, *setup.optimizer);
  TrainState state = TrainState::from_json(meta, fresh, setup.model->flops_per_token(run.seq_len), path);
  if (!state.tokenizer_hash.empty() && state.tokenizer_hash != run.info.tokenizer_hash)
    fail("{} was trained on data with tokenizer {}, but {} has tokenizer {}", run.dir, state.tokenizer_hash,
         run.o.data_dir, run.info.tokenizer_hash);
  setup.loader->restore(rank_loader_position(run, state, path));
  state.clock.budget = fresh.clock.budget;  // the budget is the config's (or --budget's), not the file's
  state.world = fresh.world;  // the next checkpoint records this job's ranks and dataset
  state.tokenizer_hash = fresh.tokenizer_hash;
  if (!run.quiet)
    std::fprintf(stderr, "train: resumed %s at step %lld (%.1fs of budget used)\n", path.c_str(),
                 (long long)state.step, state.clock.used);
  return state;
}

// config.json and run.json (run.resume-<step>.json for a resumed session), rank 0 only.
void write_run_files(const RunContext& run, const TrainSetup& setup, const TrainState& state) {
  if (!run.lead) return;
  write_json_file((fs::path(run.dir) / "config.json").string(), to_json(run.cfg));
  const TrainOptions& o = run.o;
  nlohmann::json rec = o.hooks.run_record ? o.hooks.run_record(o.argv) : nlohmann::json{{"argv", o.argv}};
  rec["dataset"] = {{"dir", fs::absolute(o.data_dir).string()}, {"tokenizer_hash", run.info.tokenizer_hash},
                    {"vocab_size", run.info.vocab_size}};
  rec["threads"] = run.threads;
  rec["ranks"] = run.world;
  rec["transport"] = run.comm->name();
  rec["device"] = run.device->description();
  rec["matmul_precision"] = prec_name(setup.model->matmul_precision());
  rec["params"] = setup.model->num_params();  // what a dashboard shows while the run trains
  rec["resumed_from_step"] = run.resuming ? nlohmann::json(state.step) : nlohmann::json(nullptr);
  const std::string name = run.resuming ? fmt::format("run.resume-{}.json", state.step) : "run.json";
  write_json_file((fs::path(run.dir) / name).string(), rec);
}

// ---- phase 4: finish ----

nlohmann::json summary_json(const RunContext& run, const TrainSetup& setup, const TrainState& state,
                            const TrainLoop& loop, const LoopEnd& end, const BpbResult& final_val) {
  const BudgetClock& clock = state.clock;
  return {
      {"config", run.cfg.name},
      {"val_bpb", final_val.bpb},
      {"val", final_val.to_json()},
      {"steps", state.step},
      {"tokens", state.tokens},
      {"device_seconds", clock.used},
      {"budget_seconds", clock.budget},
      {"stop_reason", end.reason},
      {"params", setup.model->num_params()},
      {"flops_per_token", loop.flops_per_token()},
      {"tokens_per_second", clock.used > 0 ? double(state.tokens) / clock.used : 0.0},
      {"model_flops_per_second", clock.used > 0 ? state.model_flops / clock.used : 0.0},
      {"final_loss", loop.last_loss()},
      {"threads", run.threads},
      {"ranks", run.world},
      {"transport", run.comm->name()},
      {"comm_seconds", loop.comm_total().seconds},
      {"comm_bytes", loop.comm_total().bytes},
      {"device", run.device->description()},
      {"matmul_precision", prec_name(setup.model->matmul_precision())},
      {"steps_replayed", loop.graph().stats().replayed},
      {"wall_seconds", now_seconds() - run.start_time},
  };
}

// The last checkpoint; for a finished run the final evaluation (bpb, and CORE with --core) and,
// on rank 0, the last metrics row and summary.json.
TrainResult finish(const RunContext& run, TrainSetup& setup, TrainState& state, TrainLoop& loop, const LoopEnd& end) {
  TrainResult res;
  res.steps = state.step;
  res.tokens = state.tokens;
  res.device_seconds = state.clock.used;
  res.rank = run.rank;
  loop.checkpoint(end.stopped_early ? "stopped" : "final");
  Progress* progress = loop.progress();
  if (end.stopped_early) {
    if (progress)
      progress->finish(fmt::format("stopped at step {} ({}); resume with --resume {}", state.step, end.reason, run.dir));
    if (end.reason == "signal")
      throw CollectiveError(
          fmt::format("interrupted at step {}; checkpoint saved, resume with --resume {}", state.step, run.dir));
    return res;
  }
  if (progress)
    progress->finish(fmt::format("step {} | loss {:.4f} | {:.1f}s of {:.0f}s budget", state.step, loop.last_loss(),
                                 state.clock.used, state.clock.budget));
  const BpbResult final_val = loop.evaluate(run.tc().val_tokens, !run.quiet);
  res.val_bpb = final_val.bpb;
  res.finished = true;
  nlohmann::json core;
  if (!run.o.core_bundle.empty()) {  // split over the ranks like the bpb
    CoreOptions co;
    co.bundle = run.o.core_bundle;
    co.progress = !run.quiet;
    co.comm = run.comm;
    core = eval_core(*setup.model, run.dataset->tokenizer, co);
  }
  if (!run.lead) return res;  // rank 0 alone writes the summary
  loop.log({{"step", state.step},
            {"tokens", state.tokens},
            {"device_seconds", state.clock.used},
            {"val_bpb", final_val.bpb},
            {"val_tokens", final_val.tokens},
            {"final", true}});
  nlohmann::json summary = summary_json(run, setup, state, loop, end, final_val);
  if (!core.is_null()) {
    summary["core"] = core;
    if (!core["core"].is_null()) summary["stage2"] = bpb_core_score(final_val.bpb, core["core"].get<double>());
  }
  write_json_file((fs::path(run.dir) / "summary.json").string(), summary);
  res.summary = summary;
  return res;
}

}  // namespace

TrainResult train(const TrainOptions& o) {
  RunContext run(o);
  open_run(run);
  run.device->set_threads(run.threads);
  TrainSetup setup = build(run);
  TrainState state = start_or_restore(run, setup);
  std::vector<std::string> kept_ckpts;
  if (run.resuming && run.lead) kept_ckpts = tidy_checkpoints(run.dir, state.step);
  write_run_files(run, setup, state);
  TrainLoop loop(run, setup, state, std::move(kept_ckpts));
  const LoopEnd end = loop.run();
  return finish(run, setup, state, loop, end);
}

}  // namespace clm

// The budgeted training loop (see trainer.h and docs/TRAINING.md).
//
// One optimizer step = `accum` micro-batches of micro_batch x seq_len tokens (fewer in the early
// stages of train.batch_schedule): the batches are fetched first (the loader prefetches in the
// background), then the clock runs over forward, backward and the optimizer only. Before each step the BudgetClock predicts whether it still fits; schedules are
// evaluated at the fraction of the budget used when the step starts. Evaluation and checkpointing
// happen between steps, off the clock.
//
// With several ranks (mpirun, --nproc) every rank runs this loop on its own rows of each global
// batch; train_step averages the gradients. Every decision that ends or shapes the loop is taken
// together: the step time is the slowest rank's (so the budget clocks agree to the bit), a stop
// signal seen by any rank stops all at the same step, a non-finite loss on any rank fails all, and
// evaluations are split over the ranks. Only rank 0 touches the run folder (lock, logs,
// checkpoints, summary); the others send it their loader positions for each checkpoint.
#include "train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "core/common.h"
#include "core/fault.h"
#include "core/file_lock.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "eval/bpb.h"
#include "eval/core.h"
#include "eval/stage2.h"
#include "core/profiler.h"
#include "core/progress.h"
#include "dist/comm.h"
#include "config/config.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "train/budget.h"
#include "checkpoint/checkpoint.h"
#include "train/run_dir.h"
#include "train/schedule.h"
#include "train/train_step.h"

namespace clm {

namespace fs = std::filesystem;

namespace {

// Set by SIGINT/SIGTERM/SIGUSR1: the loop finishes its step, checkpoints and exits (the one piece
// of global state, as a signal handler can only reach globals). SIGUSR1 is there for jobs under
// mpirun, which forwards it to every rank, whereas its SIGTERM kills the ranks a second later.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int) { g_stop_signal = 1; }

struct SignalGuard {
  void (*old_int)(int), (*old_term)(int), (*old_usr1)(int);
  SignalGuard() {
    g_stop_signal = 0;
    old_int = std::signal(SIGINT, on_stop_signal);
    old_term = std::signal(SIGTERM, on_stop_signal);
    old_usr1 = std::signal(SIGUSR1, on_stop_signal);
  }
  ~SignalGuard() {
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
    std::signal(SIGUSR1, old_usr1);
  }
};

std::string human(double v) {
  if (v >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

// Resolve the config: --config (+ --set), or the run's own config.json when resuming without one.
RunConfig resolve_config(const TrainOptions& o, const std::string& run_dir) {
  std::string src = o.config;
  if (src.empty()) {
    if (o.resume_dir.empty()) fail("train: --config is required (a preset or a JSON file)");
    src = (fs::path(run_dir) / "config.json").string();
    if (!path_exists(src)) fail("{} has no config.json; pass --config", run_dir);
  }
  std::vector<std::string> sets = o.sets;
  if (o.budget_seconds >= 0) sets.push_back(fmt::format("train.budget_seconds={}", o.budget_seconds));
  return load_config(src, sets);
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
      if (name.starts_with(".") && name.find(".tmp.") != std::string::npos) {
        fs::remove(e.path(), ec);
        continue;
      }
      if (dir == fs::path(run_dir) || !name.starts_with("step_") || !name.ends_with(".ckpt")) continue;
      const std::string digits = name.substr(5, name.size() - 10);
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      const int64_t st = std::stoll(digits);
      if (st > resumed_step) fs::remove(e.path(), ec);
      else found.push_back({st, name});
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> kept;
  for (auto& f : found) kept.push_back(f.second);
  return kept;
}

// Threads per rank: the configured count, else the environment's (CLOCKLM_THREADS, OMP_NUM_THREADS,
// taken as per process), else this host's cores divided among the ranks on it.
int rank_threads(const TrainConfig& tc, const Comm& comm) {
  if (tc.threads > 0) return tc.threads;
  if (std::getenv("CLOCKLM_THREADS") || std::getenv("OMP_NUM_THREADS")) return default_threads();
  return std::max(1, default_threads() / std::max(1, comm.local_world()));
}

}  // namespace

TrainResult train(const TrainOptions& o) {
  const double t_start = now_seconds();
  std::string run_dir = o.out_dir.empty() ? o.resume_dir : o.out_dir;
  if (run_dir.empty()) fail("train: --out RUN is required");
  if (!o.resume_dir.empty() && fs::weakly_canonical(o.resume_dir) != fs::weakly_canonical(run_dir))
    fail("train: --resume {} continues that run in place; omit --out or give the same folder", o.resume_dir);
  if (o.data_dir.empty()) fail("train: --data DIR is required (a folder made by `clocklm prepare`)");
  if (o.profile && !o.hooks.write_profile) fail("train: --profile needs a profile writer (TrainHooks)");
  // --resume on a run killed before its first checkpoint starts it over: nothing was saved, so
  // nothing is lost, and the user's command works the same whenever the run died.
  const bool resume_asked = !o.resume_dir.empty();
  // With several ranks on GPUs each rank takes its own GPU, and every collective goes over NCCL
  // (device_comm; host-side decisions are staged through the GPU), else over the launcher's MPI.
  Comm& launch = world_comm();
  std::shared_ptr<Backend> device = make_backend(rank_device_name(o.device, launch));
  Comm& comm = device_comm(launch, *device);
  const int rank = comm.rank(), world = comm.world();
  const bool lead = rank == 0;  // the one rank that writes the run folder and prints progress
  const bool quiet = o.quiet || !lead;
  // Rank 0's view of the folder decides (other hosts may not share it until the checkpoint is read).
  char resuming_flag =
      resume_asked && path_exists((fs::path(run_dir) / "checkpoints" / "latest").string()) ? 1 : 0;
  comm.broadcast(&resuming_flag, 1, 0);
  const bool resuming = resuming_flag != 0;

  RunConfig cfg = resolve_config(o, run_dir);
  DatasetInfo info = read_dataset_info(o.data_dir);
  const Dataset dataset = Dataset::open(o.data_dir);  // the tokenizer, for bpb's byte lengths
  if (cfg.model.vocab_size == 0) cfg.model.vocab_size = int(info.vocab_size);
  if (uint32_t(cfg.model.vocab_size) < info.vocab_size)
    fail("model.vocab_size {} is smaller than the dataset tokenizer's {} ids ({})", cfg.model.vocab_size,
         info.vocab_size, o.data_dir);
  // Larger would train (the extra rows are never targets) but validation bpb requires the model's
  // vocabulary to be the tokenizer's, so refuse it now rather than after the budget is spent.
  if (uint32_t(cfg.model.vocab_size) > info.vocab_size)
    fail("model.vocab_size {} is larger than the dataset tokenizer's {} ids ({}); set it to 0 (from the tokenizer)",
         cfg.model.vocab_size, info.vocab_size, o.data_dir);
  validate(cfg);
  const TrainConfig& tc = cfg.train;
  const int threads = rank_threads(tc, comm);
  device->set_threads(threads);
  const int64_t rank_tokens = int64_t(tc.micro_batch) * cfg.model.seq_len * world;
  if (tc.batch_tokens % rank_tokens != 0)
    fail("train.batch_tokens ({}) must be a multiple of train.micro_batch * model.seq_len * ranks ({} x {} x {})",
         tc.batch_tokens, tc.micro_batch, cfg.model.seq_len, world);

  // ---- run directory (rank 0 only) ----
  std::optional<FileLock> run_lock;
  const std::string ckpt_dir = (fs::path(run_dir) / "checkpoints").string();
  if (lead) {
    if (!resume_asked && path_exists((fs::path(run_dir) / "metrics.jsonl").string()))
      fail("{} already holds a run (metrics.jsonl); use --resume {} to continue it or choose another --out", run_dir,
           run_dir);
    make_dirs(run_dir);
    run_lock.emplace((fs::path(run_dir) / ".lock").string(), "run folder " + run_dir);
    make_dirs(ckpt_dir);
  }
  if (resume_asked && !resuming && !quiet)
    std::fprintf(stderr, "train: %s has no checkpoint yet; starting the run from step 0\n", run_dir.c_str());

  // ---- model, optimizer, data ----
  const int B = tc.micro_batch, T = cfg.model.seq_len;
  const int eval_B = tc.eval_batch > 0 ? tc.eval_batch : B;
  // The optimizer's state is at most two fp32 moments per parameter (AdamW; Muon keeps one);
  // several micro-batches per rank add one gradient-sized sum (train_step).
  const size_t extra_per_param = tc.batch_tokens > rank_tokens ? 12 : 8;
  check_fits_memory(*device,
                    GPT::memory_need(cfg.model, std::max(B, eval_B), T, *device) +
                        size_t(count_params(cfg.model).total()) * extra_per_param,
                    fmt::format("training {} (micro-batch {} x seq_len {})", cfg.name, B, T));
  GPT model(cfg.model, std::max(B, eval_B), T, *device);
  model.init_weights(tc.seed);
  Optimizer opt(model.params(), cfg.optim, &comm);
  LoaderOptions lo;
  lo.dir = o.data_dir;
  lo.split = "train";
  lo.B = B;
  lo.T = T;
  lo.seed = tc.seed;
  lo.rank = rank;
  lo.world = world;
  DataLoader loader(lo);
  Rng rng(tc.seed ^ 0x7261696eULL);  // reserved for stochastic training features; checkpointed

  const int64_t accum = tc.batch_tokens / rank_tokens;  // micro-batches per rank per step
  // train.seq_schedule: early steps cut each micro-batch's B rows of T into more, shorter rows. The
  // loader's rows and their order do not change; the same B*T tokens are read as B*T/S rows of S
  // (row-major, so no copy), i.e. attention only within aligned blocks of S tokens, and cheaper.
  const std::vector<SeqStage> seq_stages = parse_seq_schedule(tc.seq_schedule, T);
  // train.batch_schedule: early steps take fewer of the loader's micro-batches (the same rows in the
  // same order, so the run reads the same data; only the step boundaries move). The learning rates
  // are not rescaled with the step's size.
  const std::vector<BatchStage> batch_stages = parse_batch_schedule(tc.batch_schedule, tc.batch_tokens, rank_tokens);
  const double flops_per_token = model.flops_per_token(T);
  const int64_t n_params = model.num_params();
  // MFU against the CPU roofline only makes sense for the CPU backend; other devices report none.
  const double peak_flops =
      device->host_visible() && o.hooks.cpu_peak_flops ? o.hooks.cpu_peak_flops(threads) : 0.0;

  BudgetClock clock;
  clock.budget = tc.budget_seconds;
  int64_t step = 0, tokens = 0;
  double flops_done = 0;  // model FLOPs of the steps so far (attention's share depends on the row length)
  double next_eval_at = tc.eval_every_seconds, next_ckpt_at = tc.checkpoint_every_seconds;
  nlohmann::json last_val;
  std::vector<std::string> kept_ckpts;

  if (resuming) {
    std::string path = latest_checkpoint(run_dir);
    nlohmann::json st = load_checkpoint(path, cfg, model, opt);
    std::string tok_hash = st.value("tokenizer_hash", std::string());
    if (!tok_hash.empty() && tok_hash != info.tokenizer_hash)
      fail("{} was trained on data with tokenizer {}, but {} has tokenizer {}", run_dir, tok_hash, o.data_dir,
           info.tokenizer_hash);
    // Each rank continues from its own data position; with another number of ranks the rows read
    // so far are dealt anew (DataLoader::resplit_state), so the run reads the same data either way.
    const int saved_world = st.value("world", 1);
    std::vector<nlohmann::json> saved_loaders;
    if (st.contains("loaders")) saved_loaders = st.at("loaders").get<std::vector<nlohmann::json>>();
    else saved_loaders.push_back(st.at("loader"));
    nlohmann::json my_loader;
    if (saved_world == world) {
      my_loader = saved_loaders.at(size_t(rank));
    } else {
      try {
        my_loader = DataLoader::resplit_state(saved_loaders, world, B);
      } catch (const Error& e) {
        fail("{} was written by a run of {} rank(s) and this job has {}: {}; resume with {} rank(s)", path,
             saved_world, world, e.what(), saved_world);
      }
      if (!quiet)
        std::fprintf(stderr, "train: %s was written by %d rank(s); continuing with %d, the same rows dealt anew\n",
                     path.c_str(), saved_world, world);
    }
    step = st.at("step").get<int64_t>();
    tokens = st.at("tokens").get<int64_t>();
    flops_done = st.value("model_flops", double(tokens) * flops_per_token);
    clock.used = st.at("budget_used").get<double>();
    clock.recent = st.value("recent_step_seconds", std::vector<double>{});
    loader.restore(my_loader);
    auto rs = st.at("rng").get<std::vector<uint64_t>>();
    for (int i = 0; i < 4; ++i) rng.s[i] = rs.at(size_t(i));
    next_eval_at = st.value("next_eval_at", next_eval_at);
    next_ckpt_at = st.value("next_ckpt_at", next_ckpt_at);
    last_val = st.value("last_val", nlohmann::json());
    if (lead) kept_ckpts = tidy_checkpoints(run_dir, step);
    if (!quiet)
      std::fprintf(stderr, "train: resumed %s at step %lld (%.1fs of budget used)\n", path.c_str(), (long long)step,
                 clock.used);
  }
  if (lead) write_json_file((fs::path(run_dir) / "config.json").string(), to_json(cfg));
  if (lead) {
    nlohmann::json rec = o.hooks.run_record ? o.hooks.run_record(o.argv) : nlohmann::json{{"argv", o.argv}};
    rec["dataset"] = {{"dir", fs::absolute(o.data_dir).string()}, {"tokenizer_hash", info.tokenizer_hash},
                      {"vocab_size", info.vocab_size}};
    rec["threads"] = threads;
    rec["ranks"] = world;
    rec["transport"] = comm.name();
    rec["device"] = device->description();
    rec["matmul_precision"] = prec_name(model.matmul_precision());
    rec["resumed_from_step"] = resuming ? nlohmann::json(step) : nlohmann::json(nullptr);
    std::string name = resuming ? fmt::format("run.resume-{}.json", step) : "run.json";
    write_json_file((fs::path(run_dir) / name).string(), rec);
  }
  std::unique_ptr<MetricsLog> metrics;
  if (lead) metrics = std::make_unique<MetricsLog>((fs::path(run_dir) / "metrics.jsonl").string(), resuming ? step : -1);

  const bool det = tc.max_steps > 0;  // deterministic mode: schedules over steps
  auto fraction = [&] { return det ? double(step) / double(tc.max_steps) : clock.fraction(); };
  // Where the run stands in budget seconds, for the eval and checkpoint cadence. In deterministic mode
  // it is the step fraction times the budget (so the cadence is reproducible); with no budget there
  // is no periodic evaluation or checkpoint.
  auto position = [&] { return det ? fraction() * std::max(0.0, clock.budget) : clock.used; };

  // Collective: every rank hands rank 0 its loader position; rank 0 writes the file while the others
  // wait at a barrier. Writing is off the clock: without the barrier the other ranks would start
  // the next step and count rank 0's write as device time while waiting in its first collective.
  auto checkpoint = [&](const char* why) {
    const std::vector<std::string> states = comm.all_gather_strings(loader.state().dump());
    opt.gather_state();  // collective with a sharded optimizer
    if (!lead) {
      comm.barrier();
      return;
    }
    nlohmann::json loaders = nlohmann::json::array();
    for (const std::string& s : states) loaders.push_back(nlohmann::json::parse(s));
    nlohmann::json st = {{"step", step},
                         {"tokens", tokens},
                         {"model_flops", flops_done},
                         {"budget_used", clock.used},
                         {"budget_seconds", clock.budget},
                         {"recent_step_seconds", clock.recent},
                         {"loader", loaders.at(0)},
                         {"loaders", loaders},
                         {"world", world},
                         {"rng", std::vector<uint64_t>(rng.s, rng.s + 4)},
                         {"next_eval_at", next_eval_at},
                         {"next_ckpt_at", next_ckpt_at},
                         {"last_val", last_val},
                         {"tokenizer_hash", info.tokenizer_hash},
                         {"reason", why}};
    std::string name = fmt::format("step_{:08d}.ckpt", step);
    save_checkpoint((fs::path(ckpt_dir) / name).string(), cfg, model, opt, st);
    atomic_write((fs::path(ckpt_dir) / "latest").string(), name + "\n");
    if (kept_ckpts.empty() || kept_ckpts.back() != name) kept_ckpts.push_back(name);
    while (int(kept_ckpts.size()) > tc.keep_checkpoints) {
      std::error_code ec;
      fs::remove(fs::path(ckpt_dir) / kept_ckpts.front(), ec);
      kept_ckpts.erase(kept_ckpts.begin());
    }
    comm.barrier();
  };

  auto evaluate = [&](int64_t n_tokens, bool progress_evals) {
    model.set_profiler(nullptr);  // evaluation is not part of the profiled training steps
    try {
      return eval_bpb(model, dataset, n_tokens, eval_B, T, progress_evals && !quiet ? stderr : nullptr, &comm);
    } catch (const NonFiniteError&) {
      std::string keep = kept_ckpts.empty() ? "no checkpoint was written yet"
                                            : "last good checkpoint kept: " + kept_ckpts.back();
      throw CollectiveError(
          fmt::format("training diverged: validation loss is not finite after step {}; {}", step, keep));
    }
  };

  // ---- profiling: a few steps after the first (which builds the kernels' primitives) ----
  Profiler prof;
  const int64_t prof_first = step + 2, prof_steps = 3;
  double prof_seconds = 0;

  std::unique_ptr<Progress> progress;
  if (!quiet) progress = std::make_unique<Progress>("train", det ? double(tc.max_steps) : clock.budget, stderr);
  SignalGuard signals;

  std::vector<int32_t> inputs(size_t(accum) * B * T), targets(size_t(accum) * B * T);

  // Warm-up, off the clock: the first forward/backward and Newton-Schulz build their oneDNN primitives
  // (JIT; seconds on a loaded machine), which is start-up, not training. Runs on a val batch so the
  // training data position is untouched; gradients are zeroed at every step's start and weights are
  // not changed, so a warmed run is bit-identical to an unwarmed one.
  {
    LoaderOptions wl = lo;
    wl.split = "val";
    wl.shuffle = false;
    wl.loop = true;
    wl.prefetch = false;
    DataLoader wloader(wl);
    wloader.next(inputs.data(), targets.data());
    model.forward(inputs.data(), targets.data(), B, T);
    model.backward(1.0f);
    model.zero_grad();
    opt.warmup();
  }
  const int64_t session_start_step = step;
  double last_loss = NAN;
  bool stopped_early = false;
  std::string stop_reason = det ? "max_steps" : "budget";
  // A stop signal counts once any rank has seen it; ranks learn it together after each step.
  bool stop_requested = comm.any(g_stop_signal != 0);
  CommStats comm_total;
  if (!quiet)
    std::fprintf(stderr, "train: %s, %s params, %lld tokens/step (%lld x %d x %d), %s, budget %.0fs%s\n",
               cfg.name.c_str(), human(double(n_params)).c_str(), (long long)tc.batch_tokens, (long long)accum, B, T,
               cfg.optim.matrix.kind == "muon" ? "Muon+AdamW" : cfg.optim.matrix.kind == "normuon" ? "NorMuon+AdamW" : "AdamW",
               clock.budget,
               det ? fmt::format(", max_steps {}", tc.max_steps).c_str() : "");
  if (!quiet && !seq_stages.empty()) {
    std::string stages;
    for (const SeqStage& st : seq_stages) stages += fmt::format("{} until {:.0f}%, ", st.seq_len, 100.0 * st.until);
    std::fprintf(stderr, "train: rows of %sthen %d tokens (train.seq_schedule)\n", stages.c_str(), T);
  }
  if (!quiet && !batch_stages.empty()) {
    std::string stages;
    for (const BatchStage& st : batch_stages)
      stages += fmt::format("{} until {:.0f}%, ", st.tokens, 100.0 * st.until);
    std::fprintf(stderr, "train: steps of %sthen %lld tokens (train.batch_schedule)\n", stages.c_str(),
                 (long long)tc.batch_tokens);
  }

  while (true) {
    if (det && step >= tc.max_steps) break;
    if (clock.budget > 0 && !clock.next_step_fits()) {
      stop_reason = "budget";
      break;
    }
    if (o.stop_after_steps > 0 && step - session_start_step >= o.stop_after_steps) {
      stopped_early = true;
      stop_reason = "stop_after_steps";
      break;
    }
    if (stop_requested || (world == 1 && g_stop_signal)) {
      stopped_early = true;
      stop_reason = "signal";
      break;
    }
    const double frac = fraction();
    const ScheduleValues sv = schedule_at(tc, cfg.optim.matrix.momentum, frac);
    const int Ts = seq_len_at(seq_stages, T, frac);
    const int Bs = int(int64_t(B) * T / Ts);
    const int64_t step_tokens = batch_tokens_at(batch_stages, tc.batch_tokens, frac);
    const int64_t step_accum = step_tokens / rank_tokens;
    const bool profiling = o.profile && step >= prof_first && step < prof_first + prof_steps;
    model.set_profiler(profiling ? &prof : nullptr);
    opt.set_profiler(profiling ? &prof : nullptr);
    if (profiling && step == prof_first) prof.clear();

    for (int64_t a = 0; a < step_accum; ++a)
      loader.next(inputs.data() + a * B * T, targets.data() + a * B * T);
    fault_point_step();

    // ---- the timed step ----
    StepResult sr;
    const double t_begin = now_seconds();
    try {
      StepOptions so;
      so.comm = &comm;
      sr = train_step(model, &opt, inputs.data(), targets.data(), step_accum, Bs, Ts, sv, so);
    } catch (const NonFiniteError& e) {
      // With several ranks train_step throws on every rank at once, so this is collective.
      std::string keep = kept_ckpts.empty() ? "no checkpoint was written yet"
                                            : "last good checkpoint kept: " + kept_ckpts.back();
      throw CollectiveError(fmt::format("training diverged: {} at step {}; {}", e.what(), step, keep));
    }
    // The slowest rank's step time, and whether any rank was asked to stop: one all-reduce, after
    // which every rank holds the same clock and the same decision.
    double shared[2] = {sr.seconds, g_stop_signal ? 1.0 : 0.0};
    if (world > 1) comm.all_reduce(shared, 2, ReduceOp::Max);
    stop_requested = shared[1] > 0;
    const double dt = shared[0];
    comm_total.seconds += sr.comm_seconds;
    comm_total.bytes += sr.comm_bytes;
    const float grad_norm = sr.grad_norm;
    // ------------------------
    clock.add_step(dt);
    if (profiling) {
      prof_seconds += dt;
      prof.mark_step(t_begin, t_begin + dt);
    }
    ++step;
    tokens += step_tokens;
    last_loss = sr.loss;

    const double tps = double(step_tokens) / dt;
    const double step_flops_per_token = Ts == T ? flops_per_token : model.flops_per_token(Ts);
    flops_done += double(step_tokens) * step_flops_per_token;
    nlohmann::json row = {{"step", step},
                          {"tokens", tokens},
                          {"device_seconds", clock.used},
                          {"budget_fraction", fraction()},
                          {"loss", last_loss},
                          {"lr", sv.lr_scale},
                          {"muon_momentum", sv.muon_momentum},
                          {"wd_scale", sv.wd_scale},
                          {"grad_norm", grad_norm},
                          {"step_seconds", dt},
                          {"tokens_per_second", tps},
                          {"model_flops_per_second", tps * step_flops_per_token}};
    if (!seq_stages.empty()) row["seq_len"] = Ts;
    if (!batch_stages.empty()) row["batch_tokens"] = step_tokens;
    if (cfg.model.mtp_weight > 0) row["mtp_loss"] = sr.mtp_loss;
    if (peak_flops > 0) row["mfu"] = tps * step_flops_per_token / peak_flops;
    if (world > 1) {
      row["comm_seconds"] = sr.comm_seconds;
      row["comm_bytes"] = sr.comm_bytes;
    }
    bool log_row = step % tc.log_every == 0;

    // Periodic validation, off the clock (the final one happens after the loop).
    const double pos = position();
    bool do_eval = false;
    if (tc.eval_every_seconds > 0 && tc.periodic_val_tokens > 0 && pos > 0 && pos >= next_eval_at) {
      do_eval = !(det && step >= tc.max_steps);
      while (next_eval_at <= pos) next_eval_at += tc.eval_every_seconds;
    }
    if (do_eval) {
      BpbResult r = evaluate(tc.periodic_val_tokens, false);
      row["val_bpb"] = r.bpb;
      row["val_tokens"] = r.tokens;
      last_val = {{"step", step}, {"val_bpb", r.bpb}, {"val_tokens", r.tokens}};
      if (progress)
        progress->message(fmt::format("step {} | {:.1f}s of budget | val bpb {:.4f} ({} tokens)", step, clock.used,
                                      r.bpb, r.tokens));
      log_row = true;
    }
    if (log_row && metrics) metrics->append(row);

    const double mflops = tps * step_flops_per_token;
    std::string mfu = peak_flops > 0 ? fmt::format("MFU {:.0f}%", 100.0 * mflops / peak_flops)
                                     : fmt::format("{}FLOP/s", human(mflops));
    if (progress)
      progress->update(det ? double(step) : clock.used,
                    fmt::format("step {} | loss {:.4f} | {} tok/s | {} | budget {:.0f}% | lr x{:.3f}{}", step,
                                last_loss, human(tps), mfu, 100.0 * fraction(), sv.lr_scale,
                                last_val.is_null() ? "" : fmt::format(" | val {:.4f}", last_val["val_bpb"].get<double>())));

    if (profiling && step == prof_first + prof_steps) {
      model.set_profiler(nullptr);
      opt.set_profiler(nullptr);
      if (lead) o.hooks.write_profile(prof, (fs::path(run_dir) / "profile").string(), prof_seconds, int(prof_steps));
    }
    if (tc.checkpoint_every_seconds > 0 && pos > 0 && pos >= next_ckpt_at) {
      while (next_ckpt_at <= pos) next_ckpt_at += tc.checkpoint_every_seconds;
      if (!(det && step >= tc.max_steps)) checkpoint("periodic");
    }
  }
  model.set_profiler(nullptr);
  opt.set_profiler(nullptr);

  TrainResult res;
  res.steps = step;
  res.tokens = tokens;
  res.device_seconds = clock.used;
  res.rank = rank;
  checkpoint(stopped_early ? "stopped" : "final");
  if (stopped_early) {
    if (progress)
      progress->finish(fmt::format("stopped at step {} ({}); resume with --resume {}", step, stop_reason, run_dir));
    if (stop_reason == "signal")
      throw CollectiveError(
          fmt::format("interrupted at step {}; checkpoint saved, resume with --resume {}", step, run_dir));
    res.finished = false;
    return res;
  }
  if (progress)
    progress->finish(fmt::format("step {} | loss {:.4f} | {:.1f}s of {:.0f}s budget", step, last_loss, clock.used,
                              clock.budget));

  // ---- final evaluation and summary ----
  BpbResult final_val = evaluate(tc.val_tokens, !quiet);
  res.val_bpb = final_val.bpb;
  res.finished = true;
  nlohmann::json core;
  if (!o.core_bundle.empty()) {  // split over the ranks like the bpb
    CoreOptions co;
    co.bundle = o.core_bundle;
    co.progress = !quiet;
    co.comm = &comm;
    core = eval_core(model, dataset.tokenizer, co);
  }
  if (!lead) return res;  // rank 0 alone writes the summary
  nlohmann::json vrow = {{"step", step},          {"tokens", tokens},       {"device_seconds", clock.used},
                         {"val_bpb", final_val.bpb}, {"val_tokens", final_val.tokens}, {"final", true}};
  metrics->append(vrow);
  nlohmann::json summary = {
      {"config", cfg.name},
      {"val_bpb", final_val.bpb},
      {"val", final_val.to_json()},
      {"steps", step},
      {"tokens", tokens},
      {"device_seconds", clock.used},
      {"budget_seconds", clock.budget},
      {"stop_reason", stop_reason},
      {"params", n_params},
      {"flops_per_token", flops_per_token},
      {"tokens_per_second", clock.used > 0 ? double(tokens) / clock.used : 0.0},
      {"model_flops_per_second", clock.used > 0 ? flops_done / clock.used : 0.0},
      {"final_loss", last_loss},
      {"threads", threads},
      {"ranks", world},
      {"transport", comm.name()},
      {"comm_seconds", comm_total.seconds},
      {"comm_bytes", comm_total.bytes},
      {"device", device->description()},
      {"matmul_precision", prec_name(model.matmul_precision())},
      {"wall_seconds", now_seconds() - t_start},
  };
  if (!core.is_null()) {
    summary["core"] = core;
    if (!core["core"].is_null()) summary["stage2"] = stage2_score(final_val.bpb, core["core"].get<double>());
  }
  write_json_file((fs::path(run_dir) / "summary.json").string(), summary);
  res.summary = summary;
  return res;
}

}  // namespace clm

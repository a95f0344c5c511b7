// Opening a training run (see run_context.h).
#include "train/run_context.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace clm {

namespace fs = std::filesystem;

namespace {

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

// Threads per rank: the configured count, else the environment's (CLOCKLM_THREADS, OMP_NUM_THREADS,
// taken as per process), else this host's cores divided among the ranks on it.
int rank_threads(const TrainConfig& tc, const Comm& comm) {
  if (tc.threads > 0) return tc.threads;
  if (std::getenv("CLOCKLM_THREADS") || std::getenv("OMP_NUM_THREADS")) return default_threads();
  return std::max(1, default_threads() / std::max(1, comm.local_world()));
}

void check_options(const TrainOptions& o, const std::string& run_dir) {
  if (run_dir.empty()) fail("train: --out RUN is required");
  if (!o.resume_dir.empty() && fs::weakly_canonical(o.resume_dir) != fs::weakly_canonical(run_dir))
    fail("train: --resume {} continues that run in place; omit --out or give the same folder", o.resume_dir);
  if (o.data_dir.empty()) fail("train: --data DIR is required (a folder made by `clocklm prepare`)");
  if (o.profile && !o.hooks.write_profile) fail("train: --profile needs a profile writer (TrainHooks)");
}

// The config with the dataset's vocabulary, checked against it and validated.
void load_run_config(RunContext& run) {
  run.cfg = resolve_config(run.o, run.dir);
  run.info = read_dataset_info(run.o.data_dir);
  run.dataset.emplace(Dataset::open(run.o.data_dir));
  ModelConfig& mc = run.cfg.model;
  const uint32_t vocab = run.info.vocab_size;
  if (mc.vocab_size == 0) mc.vocab_size = int(vocab);
  if (uint32_t(mc.vocab_size) < vocab)
    fail("model.vocab_size {} is smaller than the dataset tokenizer's {} ids ({})", mc.vocab_size, vocab,
         run.o.data_dir);
  // Larger would train (the extra rows are never targets) but validation bpb requires the model's
  // vocabulary to be the tokenizer's, so refuse it now rather than after the budget is spent.
  if (uint32_t(mc.vocab_size) > vocab)
    fail("model.vocab_size {} is larger than the dataset tokenizer's {} ids ({}); set it to 0 (from the tokenizer)",
         mc.vocab_size, vocab, run.o.data_dir);
  validate(run.cfg);
}

// Rank 0 claims the folder: refuses to start over a run that exists, creates it and takes its lock.
void claim_run_folder(RunContext& run) {
  run.ckpt_dir = (fs::path(run.dir) / "checkpoints").string();
  if (run.lead) {
    if (!run.resume_asked && path_exists((fs::path(run.dir) / "metrics.jsonl").string()))
      fail("{} already holds a run (metrics.jsonl); use --resume {} to continue it or choose another --out", run.dir,
           run.dir);
    make_dirs(run.dir);
    run.lock.emplace((fs::path(run.dir) / ".lock").string(), "run folder " + run.dir);
    make_dirs(run.ckpt_dir);
  }
  if (run.resume_asked && !run.resuming && !run.quiet)
    std::fprintf(stderr, "train: %s has no checkpoint yet; starting the run from step 0\n", run.dir.c_str());
}

}  // namespace

void open_run(RunContext& run) {
  const TrainOptions& o = run.o;
  run.dir = o.out_dir.empty() ? o.resume_dir : o.out_dir;
  check_options(o, run.dir);
  // --resume on a run killed before its first checkpoint starts it over: nothing was saved, so
  // nothing is lost, and the user's command works the same whenever the run died.
  run.resume_asked = !o.resume_dir.empty();
  // With several ranks on GPUs each rank takes its own GPU, and every collective goes over NCCL
  // (device_comm; host-side decisions are staged through the GPU), else over the launcher's MPI.
  Comm& launch = world_comm();
  run.device = o.backend && launch.world() == 1 ? o.backend : make_backend(rank_device_name(o.device, launch));
  run.comm = &device_comm(launch, *run.device);
  run.rank = run.comm->rank();
  run.world = run.comm->world();
  run.lead = run.rank == 0;
  run.quiet = o.quiet || !run.lead;
  // Rank 0's view of the folder decides (other hosts may not share it until the checkpoint is read).
  char resuming_flag =
      run.resume_asked && path_exists((fs::path(run.dir) / "checkpoints" / "latest").string()) ? 1 : 0;
  run.comm->broadcast(&resuming_flag, 1, 0);
  run.resuming = resuming_flag != 0;

  load_run_config(run);
  const TrainConfig& tc = run.tc();
  run.threads = rank_threads(tc, *run.comm);
  run.micro_batch = tc.micro_batch;
  run.seq_len = run.cfg.model.seq_len;
  run.eval_batch = tc.eval_batch > 0 ? tc.eval_batch : tc.micro_batch;
  run.rank_tokens = int64_t(tc.micro_batch) * run.seq_len * run.world;
  if (tc.batch_tokens % run.rank_tokens != 0)
    fail("train.batch_tokens ({}) must be a multiple of train.micro_batch * model.seq_len * ranks ({} x {} x {})",
         tc.batch_tokens, tc.micro_batch, run.seq_len, run.world);
  if (tc.graph == "on" && (run.world > 1 || !run.device->can_record()))
    fail("train.graph=on: {} (use auto or off)", run.world > 1 ? "recorded steps run in one process only"
                                                              : run.device->name() + " cannot record a step");
  claim_run_folder(run);
}

LoaderOptions train_loader_options(const RunContext& run) {
  LoaderOptions lo;
  lo.dir = run.o.data_dir;
  lo.split = "train";
  lo.B = run.micro_batch;
  lo.T = run.seq_len;
  lo.seed = run.tc().seed;
  lo.rank = run.rank;
  lo.world = run.world;
  return lo;
}

}  // namespace clm

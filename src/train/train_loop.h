// The step loop of `train` (the third of its phases, see trainer.cpp): over a built TrainSetup
// and a started TrainState it runs timed steps with their schedules until the budget, max_steps, a
// stop signal or stop_after_steps ends it, keeping the metrics log, the periodic evaluations and
// checkpoints, the progress line and the profile of a few steps. Also the final checkpoint and
// evaluation for the last phase.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/profiler.h"
#include "core/progress.h"
#include "dist/comm.h"
#include "eval/bpb.h"
#include "train/run_context.h"
#include "train/run_dir.h"
#include "train/schedule.h"
#include "train/train_setup.h"
#include "train/step_window.h"
#include "train/train_state.h"
#include "train/train_step.h"

namespace clm {

// Why the loop ended.
struct LoopEnd {
  bool stopped_early = false;  // stop_after_steps or a signal: no final evaluation
  std::string reason;          // max_steps | budget | stop_after_steps | signal
};

// The step loop over a built setup and a started state: schedules, timed steps, the metrics log,
// periodic evaluations and checkpoints, the progress line and the profile of a few steps.
class TrainLoop {
 public:
  TrainLoop(const RunContext& run, TrainSetup& setup, TrainState& state, std::vector<std::string> kept_ckpts);
  LoopEnd run();
  // Collective: every rank hands rank 0 its loader position; rank 0 writes the file while the
  // others wait at a barrier. Writing is off the clock: without the barrier the other ranks would
  // start the next step and count rank 0's write as device time while waiting in its first collective.
  void checkpoint(const char* why);
  // Validation bpb over n_tokens, split over the ranks; a non-finite loss fails the run.
  BpbResult evaluate(int64_t n_tokens, bool print_progress);
  Progress* progress() { return progress_.get(); }
  void log(const nlohmann::json& row) { metrics_->append(row); }  // rank 0 only
  double last_loss() const { return last_loss_; }
  const CommStats& comm_total() const { return comm_total_; }
  const StepGraph& graph() const { return graph_; }
  double flops_per_token() const { return flops_per_token_; }

 private:
  // Deterministic mode (train.max_steps): schedules and cadence follow the step, not the clock.
  bool deterministic() const { return tc_.max_steps > 0; }
  double fraction() const;
  double position() const;
  std::string diverged_note() const;
  void warm_up();
  void print_banner() const;
  std::optional<LoopEnd> stop_before_step();
  StepResult timed_step(int64_t micro_batches, int rows, int row_len, const ScheduleValues& sv);
  void after_step(StepResult sr, int64_t step_tokens, int row_len, const ScheduleValues& sv);
  // Reads every queued step's results (one to_host); throws the divergence error naming the first
  // non-finite one. Fills the newest step's loss, aux and grad_norm into sr when given.
  void read_queued(StepResult* sr = nullptr);
  bool eval_due(double pos);
  void periodic_eval(nlohmann::json& row);
  void show_progress(double tps, double step_flops_per_token, const ScheduleValues& sv);

  const RunContext& run_;
  const TrainConfig& tc_;
  Comm& comm_;
  GPT& model_;
  Optimizer& opt_;
  DataLoader& loader_;
  TrainState& state_;
  std::vector<std::string> kept_ckpts_;  // checkpoint file names, oldest first
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<Progress> progress_;
  const int64_t accum_;  // micro-batches per rank per full-size step
  // train.seq_schedule: early steps cut each micro-batch's B rows of T into more, shorter rows. The
  // loader's rows and their order do not change; the same B*T tokens are read as B*T/S rows of S
  // (row-major, so no copy), i.e. attention only within aligned blocks of S tokens, and cheaper.
  const std::vector<SeqStage> seq_stages_;
  // train.batch_schedule: early steps take fewer of the loader's micro-batches (the same rows in the
  // same order, so the run reads the same data; only the step boundaries move). The learning rates
  // are not rescaled with the step's size.
  const std::vector<BatchStage> batch_stages_;
  const double flops_per_token_;
  // MFU against the CPU roofline only makes sense for the CPU backend; other devices report none.
  const double peak_flops_;
  std::vector<int32_t> inputs_, targets_;
  // The profile: a few steps after the first of the session (which builds the kernels' primitives).
  Profiler prof_;
  const int64_t prof_first_, prof_steps_ = 3;
  double prof_seconds_ = 0;
  const int64_t session_start_step_;
  double last_loss_ = NAN;
  bool stop_requested_ = false;  // a stop signal counts once any rank has seen it
  CommStats comm_total_;
  // Single process: the steps run since the last read (step_window.h); with several ranks every
  // step reads its losses for the collective decision, and this stays empty.
  StepWindow queued_;
  // train.graph: the steps recorded and replayed where the device can (single process).
  StepGraph graph_;
};

}  // namespace clm

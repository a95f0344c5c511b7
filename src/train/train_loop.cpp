// The step loop of `train` (see train_loop.h).
//
// One optimizer step = `accum` micro-batches of micro_batch x seq_len tokens (fewer in the early
// stages of train.batch_schedule): the batches are fetched first (the loader prefetches in the
// background), then the clock runs over forward, backward and the optimizer only. Before each step
// the BudgetClock predicts whether it still fits; schedules are evaluated at the fraction of the
// budget used when the step starts. Evaluation and checkpointing happen between steps, off the clock.
//
// With several ranks (mpirun, --nproc) every rank runs this loop on its own rows of each global
// batch; train_step averages the gradients. Every decision that ends or shapes the loop is taken
// together: the step time is the slowest rank's (so the budget clocks agree to the bit), a stop
// signal seen by any rank stops all at the same step, a non-finite loss on any rank fails all, and
// evaluations are split over the ranks. Only rank 0 touches the run folder (lock, logs,
// checkpoints, summary); the others send it their loader positions for each checkpoint.
#include "train/train_loop.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "core/common.h"
#include "core/fault.h"
#include "core/json_parse.h"

namespace clm {

namespace fs = std::filesystem;

namespace {

// Steps queued without a read at most (their scalars are a few doubles each): with a longer
// log_every the loop also reads, without logging, every this many steps.
constexpr int kMaxQueuedSteps = 256;

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

// The matmul ceiling MFU is measured against: on a CPU this machine's cached roofline when it has
// been measured (0, no MFU shown, otherwise: measuring would take the run's time), on a GPU the
// device's own timed gemm in the model's precision.
double matmul_peak(const RunContext& run, const GPT& model) {
  if (run.device->host_visible()) return run.o.hooks.cpu_peak_flops ? run.o.hooks.cpu_peak_flops(run.threads) : 0.0;
  try {
    return run.device->peak_flops(model.matmul_precision());
  } catch (const Error&) {
    return 0.0;
  }
}

}  // namespace

TrainLoop::TrainLoop(const RunContext& run, TrainSetup& setup, TrainState& state, std::vector<std::string> kept_ckpts)
    : run_(run),
      tc_(run.tc()),
      comm_(*run.comm),
      model_(*setup.model),
      opt_(*setup.optimizer),
      loader_(*setup.loader),
      state_(state),
      kept_ckpts_(std::move(kept_ckpts)),
      accum_(tc_.batch_tokens / run.rank_tokens),
      seq_stages_(parse_seq_schedule(tc_.seq_schedule, run.seq_len)),
      batch_stages_(parse_batch_schedule(tc_.batch_schedule, tc_.batch_tokens, run.rank_tokens)),
      flops_per_token_(setup.model->flops_per_token(run.seq_len)),
      peak_flops_(matmul_peak(run, *setup.model)),
      inputs_(size_t(accum_) * run.micro_batch * run.seq_len),
      targets_(inputs_.size()),
      prof_first_(state.step + 2),
      session_start_step_(state.step),
      queued_(setup.model->backend(), accum_, std::min(tc_.log_every, kMaxQueuedSteps)),
      graph_(graph_mode_from_name(tc_.graph)) {
  if (run.lead)
    metrics_ = std::make_unique<MetricsLog>((fs::path(run.dir) / "metrics.jsonl").string(),
                                            run.resuming ? state.step : -1);
}

double TrainLoop::fraction() const {
  return deterministic() ? double(state_.step) / double(tc_.max_steps) : state_.clock.fraction();
}

// Where the run stands in budget seconds, for the eval and checkpoint cadence. In deterministic mode
// it is the step fraction times the budget (so the cadence is reproducible); with no budget there
// is no periodic evaluation or checkpoint.
double TrainLoop::position() const {
  return deterministic() ? fraction() * std::max(0.0, state_.clock.budget) : state_.clock.used;
}

std::string TrainLoop::diverged_note() const {
  return kept_ckpts_.empty() ? "no checkpoint was written yet" : "last good checkpoint kept: " + kept_ckpts_.back();
}

void TrainLoop::checkpoint(const char* why) {
  const std::vector<std::string> positions = comm_.all_gather_strings(loader_.state().dump());
  opt_.gather_state();  // collective with a sharded optimizer
  if (!run_.lead) {
    comm_.barrier();
    return;
  }
  state_.loaders.clear();
  for (const std::string& s : positions) state_.loaders.push_back(parse_json(s, "a rank's loader position"));
  state_.reason = why;
  const std::string name = fmt::format("step_{:08d}.ckpt", state_.step);
  save_checkpoint((fs::path(run_.ckpt_dir) / name).string(), run_.cfg, model_, opt_, state_.to_json());
  atomic_write((fs::path(run_.ckpt_dir) / "latest").string(), name + "\n");
  if (kept_ckpts_.empty() || kept_ckpts_.back() != name) kept_ckpts_.push_back(name);
  while (int(kept_ckpts_.size()) > tc_.keep_checkpoints) {
    std::error_code ec;
    fs::remove(fs::path(run_.ckpt_dir) / kept_ckpts_.front(), ec);
    kept_ckpts_.erase(kept_ckpts_.begin());
  }
  comm_.barrier();
}

BpbResult TrainLoop::evaluate(int64_t n_tokens, bool print_progress) {
  model_.set_profiler(nullptr);  // evaluation is not part of the profiled training steps
  try {
    return eval_bpb(model_, *run_.dataset, n_tokens, run_.eval_batch, run_.seq_len,
                    print_progress && !run_.quiet ? stderr : nullptr, &comm_);
  } catch (const NonFiniteError&) {
    throw CollectiveError(fmt::format("training diverged: validation loss is not finite after step {}; {}",
                                      state_.step, diverged_note()));
  }
}

// Off the clock: the first forward/backward and Newton-Schulz build their oneDNN primitives (JIT;
// seconds on a loaded machine), which is start-up, not training. Runs on a val batch so the
// training data position is untouched; gradients are zeroed at every step's start and weights are
// not changed, so a warmed run is bit-identical to an unwarmed one.
void TrainLoop::warm_up() {
  LoaderOptions val = train_loader_options(run_);
  val.split = "val";
  val.shuffle = false;
  val.loop = true;
  val.prefetch = false;
  DataLoader val_loader(val);
  val_loader.next(inputs_.data(), targets_.data());
  model_.forward(inputs_.data(), targets_.data(), run_.micro_batch, run_.seq_len);
  model_.backward(1.0f);
  model_.zero_grad();
  opt_.warmup();
}

void TrainLoop::print_banner() const {
  if (run_.quiet) return;
  const OptimConfig& oc = run_.cfg.optim;
  const char* optimizers = oc.matrix.kind == "muon"     ? "Muon+AdamW"
                           : oc.matrix.kind == "normuon" ? "NorMuon+AdamW"
                                                         : "AdamW";
  std::fprintf(stderr, "train: %s, %s params, %lld tokens/step (%lld x %d x %d), %s, budget %.0fs%s\n",
               run_.cfg.name.c_str(), human(double(model_.num_params())).c_str(), (long long)tc_.batch_tokens,
               (long long)accum_, run_.micro_batch, run_.seq_len, optimizers, state_.clock.budget,
               deterministic() ? fmt::format(", max_steps {}", tc_.max_steps).c_str() : "");
  if (!seq_stages_.empty()) {
    std::string stages;
    for (const SeqStage& st : seq_stages_) stages += fmt::format("{} until {:.0f}%, ", st.seq_len, 100.0 * st.until);
    std::fprintf(stderr, "train: rows of %sthen %d tokens (train.seq_schedule)\n", stages.c_str(), run_.seq_len);
  }
  if (run_.world == 1 && graph_.active(model_.backend()))
    std::fprintf(stderr, "train: each step shape recorded once and replayed (train.graph=%s)\n",
                 graph_mode_name(graph_.mode()));
  if (!batch_stages_.empty()) {
    std::string stages;
    for (const BatchStage& st : batch_stages_) stages += fmt::format("{} until {:.0f}%, ", st.tokens, 100.0 * st.until);
    std::fprintf(stderr, "train: steps of %sthen %lld tokens (train.batch_schedule)\n", stages.c_str(),
                 (long long)tc_.batch_tokens);
  }
}

std::optional<LoopEnd> TrainLoop::stop_before_step() {
  if (deterministic() && state_.step >= tc_.max_steps) return LoopEnd{false, "max_steps"};
  if (state_.clock.budget > 0 && !state_.clock.next_step_fits()) return LoopEnd{false, "budget"};
  if (run_.o.stop_after_steps > 0 && state_.step - session_start_step_ >= run_.o.stop_after_steps)
    return LoopEnd{true, "stop_after_steps"};
  if (stop_requested_ || (run_.world == 1 && g_stop_signal)) return LoopEnd{true, "signal"};
  return std::nullopt;
}

// One optimizer step on the batches already fetched, timed; with several ranks the slowest rank's
// time and whether any rank was asked to stop, in one all-reduce after which every rank holds the
// same clock and the same decision. Returns the result with `seconds` set to the shared time.
StepResult TrainLoop::timed_step(int64_t micro_batches, int rows, int row_len, const ScheduleValues& sv) {
  StepResult sr;
  const bool queue = run_.world == 1;
  if (queue && !queued_.fits(micro_batches)) read_queued();
  try {
    StepOptions so;
    so.comm = &comm_;
    QueuedStep q;
    if (queue) {
      so.scalars = queued_.next(micro_batches);
      so.queued = &q;
      so.graph = &graph_;
    }
    sr = train_step(model_, &opt_, inputs_.data(), targets_.data(), micro_batches, rows, row_len, sv, so);
    if (queue) queued_.add(std::move(q), state_.step);
  } catch (const NonFiniteError& e) {
    read_queued();  // an earlier queued step that was not finite is the one to report
    // With several ranks train_step throws on every rank at once, so this is collective.
    throw CollectiveError(fmt::format("training diverged: {} at step {}; {}", e.what(), state_.step, diverged_note()));
  }
  double shared[2] = {sr.seconds, g_stop_signal ? 1.0 : 0.0};
  if (run_.world > 1) comm_.all_reduce(shared, 2, ReduceOp::Max);
  stop_requested_ = shared[1] > 0;
  sr.seconds = shared[0];
  comm_total_.seconds += sr.comm_seconds;
  comm_total_.bytes += sr.comm_bytes;
  return sr;
}

void TrainLoop::read_queued(StepResult* sr) {
  if (queued_.empty()) return;
  StepWindow::Read r = queued_.read(&opt_);
  if (!r.error.empty())
    throw CollectiveError(
        fmt::format("training diverged: {} at step {}; {}", r.error, r.error_step, diverged_note()));
  last_loss_ = r.last.loss;
  if (!sr) return;
  sr->loss = r.last.loss;
  sr->aux = std::move(r.last.aux);
  sr->grad_norm = r.last.grad_norm;
}

// Whether a periodic validation is due at `pos`; moves the next one past it.
bool TrainLoop::eval_due(double pos) {
  bool due = false;
  if (tc_.eval_every_seconds > 0 && tc_.periodic_val_tokens > 0 && pos > 0 && pos >= state_.next_eval_at) {
    due = !(deterministic() && state_.step >= tc_.max_steps);
    while (state_.next_eval_at <= pos) state_.next_eval_at += tc_.eval_every_seconds;
  }
  return due;
}

// Periodic validation, off the clock (the final one happens after the loop).
void TrainLoop::periodic_eval(nlohmann::json& row) {
  const BpbResult r = evaluate(tc_.periodic_val_tokens, false);
  row["val_bpb"] = r.bpb;
  row["val_tokens"] = r.tokens;
  state_.last_val = {{"step", state_.step}, {"val_bpb", r.bpb}, {"val_tokens", r.tokens}};
  if (progress_)
    progress_->message(fmt::format("step {} | {:.1f}s of budget | val bpb {:.4f} ({} tokens)", state_.step,
                                   state_.clock.used, r.bpb, r.tokens));
}

void TrainLoop::show_progress(double tps, double step_flops_per_token, const ScheduleValues& sv) {
  if (!progress_) return;
  const double model_flops_per_second = tps * step_flops_per_token;
  const std::string mfu = peak_flops_ > 0 ? fmt::format("MFU {:.0f}%", 100.0 * model_flops_per_second / peak_flops_)
                                          : fmt::format("{}FLOP/s", human(model_flops_per_second));
  const std::string val = state_.last_val.is_null()
                              ? ""
                              : fmt::format(" | val {:.4f}", state_.last_val["val_bpb"].get<double>());
  progress_->update(deterministic() ? double(state_.step) : state_.clock.used,
                    fmt::format("step {} | loss {:.4f} | {} tok/s | {} | budget {:.0f}% | lr x{:.3f}{}", state_.step,
                                last_loss_, human(tps), mfu, 100.0 * fraction(), sv.lr_scale, val));
}

// The bookkeeping of a finished step: state, metrics row, periodic evaluation, progress line,
// the profile's end and the periodic checkpoint. A single process reads the queued steps' results
// only here, when a metrics row is written (every log_every steps, or with an evaluation) or a
// checkpoint is due, so that a non-finite step is reported at the latest at the next of these (or
// at the loop's end, run()).
void TrainLoop::after_step(StepResult sr, int64_t step_tokens, int row_len, const ScheduleValues& sv) {
  const double dt = sr.seconds;  // the slowest rank's (timed_step)
  ++state_.step;
  state_.tokens += step_tokens;
  const double pos = position();
  const bool evaluate_now = eval_due(pos);
  const bool logged = evaluate_now || state_.step % tc_.log_every == 0;
  const bool checkpoint_now = tc_.checkpoint_every_seconds > 0 && pos > 0 && pos >= state_.next_ckpt_at;
  if (logged || checkpoint_now) read_queued(&sr);
  if (run_.world > 1) last_loss_ = sr.loss;  // read by every step (train_step)
  const double tps = double(step_tokens) / dt;
  const double step_flops_per_token = row_len == run_.seq_len ? flops_per_token_ : model_.flops_per_token(row_len);
  state_.model_flops += double(step_tokens) * step_flops_per_token;
  nlohmann::json row = {{"step", state_.step},
                        {"tokens", state_.tokens},
                        {"device_seconds", state_.clock.used},
                        {"budget_fraction", fraction()},
                        {"loss", last_loss_},
                        {"lr", sv.lr_scale},
                        {"muon_momentum", sv.muon_momentum},
                        {"wd_scale", sv.wd_scale},
                        {"grad_norm", sr.grad_norm},
                        {"step_seconds", dt},
                        {"tokens_per_second", tps},
                        {"model_flops_per_second", tps * step_flops_per_token}};
  if (!seq_stages_.empty()) row["seq_len"] = row_len;
  if (!batch_stages_.empty()) row["batch_tokens"] = step_tokens;
  for (const auto& [name, value] : sr.aux) row[name] = value;  // e.g. mtp_loss
  if (peak_flops_ > 0) row["mfu"] = tps * step_flops_per_token / peak_flops_;
  if (run_.world > 1) {
    row["comm_seconds"] = sr.comm_seconds;
    row["comm_bytes"] = sr.comm_bytes;
  }
  if (evaluate_now) periodic_eval(row);
  if (logged && metrics_) metrics_->append(row);
  show_progress(tps, step_flops_per_token, sv);
  if (run_.o.profile && state_.step == prof_first_ + prof_steps_) {
    model_.set_profiler(nullptr);
    opt_.set_profiler(nullptr);
    if (run_.lead)
      run_.o.hooks.write_profile(prof_, (fs::path(run_.dir) / "profile").string(), prof_seconds_, int(prof_steps_));
  }
  if (checkpoint_now) {
    while (state_.next_ckpt_at <= pos) state_.next_ckpt_at += tc_.checkpoint_every_seconds;
    if (!(deterministic() && state_.step >= tc_.max_steps)) checkpoint("periodic");
  }
}

LoopEnd TrainLoop::run() {
  if (!run_.quiet)
    progress_ = std::make_unique<Progress>("train", deterministic() ? double(tc_.max_steps) : state_.clock.budget,
                                           stderr);
  SignalGuard signals;
  warm_up();
  stop_requested_ = comm_.any(g_stop_signal != 0);
  print_banner();
  const int B = run_.micro_batch, T = run_.seq_len;
  while (true) {
    if (std::optional<LoopEnd> end = stop_before_step()) {
      read_queued(nullptr);  // the last steps' results, before the final checkpoint and evaluation
      model_.set_profiler(nullptr);
      opt_.set_profiler(nullptr);
      return *end;
    }
    const double frac = fraction();
    const ScheduleValues sv = schedule_at(tc_, run_.cfg.optim.matrix.momentum, frac);
    const int row_len = seq_len_at(seq_stages_, T, frac);
    const int rows = int(int64_t(B) * T / row_len);
    const int64_t step_tokens = batch_tokens_at(batch_stages_, tc_.batch_tokens, frac);
    const int64_t micro_batches = step_tokens / run_.rank_tokens;
    const bool profiling = run_.o.profile && state_.step >= prof_first_ && state_.step < prof_first_ + prof_steps_;
    model_.set_profiler(profiling ? &prof_ : nullptr);
    opt_.set_profiler(profiling ? &prof_ : nullptr);
    if (profiling && state_.step == prof_first_) prof_.clear();

    for (int64_t a = 0; a < micro_batches; ++a)
      loader_.next(inputs_.data() + a * B * T, targets_.data() + a * B * T);
    fault_point_step();
    const double t_begin = now_seconds();
    const StepResult sr = timed_step(micro_batches, rows, row_len, sv);
    state_.clock.add_step(sr.seconds);
    if (profiling) {
      prof_seconds_ += sr.seconds;
      prof_.mark_step(t_begin, t_begin + sr.seconds);
    }
    after_step(sr, step_tokens, row_len, sv);
  }
}

}  // namespace clm

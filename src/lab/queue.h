// The experiment queue: a folder of experiments (config, overrides, budget, data, the submitter's
// hypothesis) that the CLI (`clocklm exp`) and the MCP server both submit to and read. Each
// experiment is QUEUE/exp-NNNN/ with experiment.json (what was asked, never changed) and state.json
// (queued | running | done | failed | cancelled, the attempts and their device time), both written
// atomically; ids come from exclusive mkdir and every state change holds QUEUE/queue.lock, so
// several submitters may work at once. One runner at a time (QUEUE/runner.lock) executes the
// experiments in id order (lab/queue_runner.h). Layout and rules: docs/AGENTS.md.
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lab/ledger.h"

namespace clm {

struct ExperimentSpec {
  std::string name;               // optional label
  std::string config;             // preset or config file (made absolute when it is a file)
  std::vector<std::string> sets;  // key=value overrides
  std::string data;               // prepared dataset folder ("" = the queue's default), absolute
  std::string budget;             // device-time budget as given ("90s", "5m")
  double budget_seconds = 0;
  std::string hypothesis;  // why the submitter thinks this is worth its device time
  std::string baseline;    // experiment id or run directory to compare with ("" = queue default)
  bool profile = false;    // train --profile
  std::string device = "auto";  // train --device
  std::string submitter;        // free text, e.g. "cli" or the MCP client's name
};
nlohmann::json to_json(const ExperimentSpec& s);
ExperimentSpec experiment_spec_from_json(const nlohmann::json& j);

struct Experiment {
  std::string id;   // "exp-0001"
  std::string dir;  // QUEUE/exp-0001
  ExperimentSpec spec;
  std::string submitted;
  nlohmann::json state;  // state.json
  std::string status() const { return state.value("state", std::string("queued")); }
  std::string run_dir() const { return dir + "/run"; }
  std::string log_path() const { return dir + "/train.log"; }
  bool active() const { return status() == "queued" || status() == "running"; }
};

struct QueueSettings {
  double cap_seconds = -1;  // device-time cap over all experiments; < 0: none
  std::string data;         // default dataset for submissions without one
  std::string baseline;     // default baseline (experiment id or run directory)
};

// Holds QUEUE/runner.lock while alive. The descriptor is deliberately inherited by the runner's
// training children, so the lock stays held until the last process of a runner is gone: a runner
// killed while its child still checkpoints does not look dead before the child has exited.
class RunnerLock {
 public:
  static std::optional<RunnerLock> try_acquire(const std::string& queue_dir);
  RunnerLock(RunnerLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RunnerLock(const RunnerLock&) = delete;
  ~RunnerLock();

 private:
  explicit RunnerLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

class ExperimentQueue {
 public:
  explicit ExperimentQueue(std::string dir);
  const std::string& dir() const { return dir_; }
  bool exists() const;

  QueueSettings settings() const;          // QUEUE/queue.json, or the defaults
  void configure(const QueueSettings& s);  // creates the queue if needed

  // Validates the spec (config and overrides load, the dataset exists, the budget is positive),
  // refuses it when the ledger's cap would be exceeded, then writes it as queued.
  Experiment submit(ExperimentSpec spec);
  // Every experiment in id order. Experiments left `running` by a runner that is gone are settled
  // first (queued to resume from their checkpoint, or failed with the reason).
  std::vector<Experiment> list();
  Experiment get(const std::string& id);  // Error for an unknown id
  // Queued: cancelled at once. Running: asks the training process to stop (it checkpoints); the
  // runner then marks it cancelled. Finished: Error.
  Experiment cancel(const std::string& id);
  Ledger ledger();
  bool runner_active() const;
  nlohmann::json runner_info() const;  // QUEUE/runner.json when a runner is active, else null

  // An experiment id ("exp-0003", "3", "0003") -> its run directory; anything else is taken as
  // a run directory path. Throws Error when neither exists.
  std::string resolve_run(const std::string& id_or_path);
  std::optional<std::string> find_id(const std::string& s) const;  // normalised id if it names one

  // ---- for the runner (lab/queue_runner.cpp); call while holding the RunnerLock ----
  // Settles experiments left running, then marks the first queued one running with a new attempt.
  std::optional<Experiment> claim_next(pid_t runner_pid);
  void set_child(const std::string& id, pid_t child);
  // Ends the running attempt: done (exit 0 and summary.json), cancelled (if asked) or failed.
  Experiment finish_attempt(const std::string& id, int exit_status);
  bool has_queued();

 private:
  Experiment load(const std::string& id) const;
  void save_state(const Experiment& e) const;
  std::vector<std::string> ids() const;
  void settle_orphans(bool runner_gone);  // needs the queue lock
  Ledger ledger_locked();                 // needs the queue lock
  std::string dir_;
};

// JSON view of an experiment for `exp list/status --json` and the MCP tools: id, name, state,
// reason, config, set, budget, data, hypothesis, baseline, submitted/started/finished, attempts,
// device_seconds (all attempts, a running one up to its latest metrics row), and when the run has
// them: steps, val_bpb, tokens_per_second.
nlohmann::json experiment_json(const Experiment& e);

}  // namespace clm

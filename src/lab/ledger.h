// The device-time ledger of an experiment queue: device seconds spent per experiment (every
// attempt, an interrupted one included) and in total, the budget still reserved by queued and
// running experiments, and an optional cap that refuses submissions past it.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace clm {

struct Ledger {
  double spent = 0;     // device seconds over all attempts of all experiments
  double reserved = 0;  // budget not yet spent by queued and running experiments
  double cap = -1;      // < 0: no cap
  int experiments = 0;
  bool capped() const { return cap >= 0; }
  double remaining() const;  // cap - spent - reserved (infinity without a cap), may be negative
  // Counts one experiment from its state.json, its budget and its run folder: the device seconds
  // it was charged, and while it is queued or running the part of its budget not yet spent.
  // Returns the seconds charged to it.
  double charge(const nlohmann::json& state, double budget_seconds, const std::string& run_dir);
  nlohmann::json to_json() const;
  std::string describe() const;  // "spent 1m35s of 10h00m, 5m00s reserved, 9h53m remaining"
};

// Throws Error with a one-line message when an experiment asking for `budget_seconds` would take
// the queue past its cap.
void check_cap(const Ledger& l, double budget_seconds, const std::string& queue_dir);

// Device seconds a run has recorded: summary.json's device_seconds, else its last metrics row's
// (a torn final line skipped), else 0.
double run_device_seconds(const std::string& run_dir);
// The budget used at the run's latest checkpoint (where a resumed attempt starts), 0 without one.
double checkpoint_device_seconds(const std::string& run_dir);
bool has_checkpoint(const std::string& run_dir);
// Device seconds charged to one experiment: its ended attempts' charges plus, for an attempt still
// running, what the run recorded since that attempt started.
double experiment_device_seconds(const nlohmann::json& state, const std::string& run_dir);

}  // namespace clm

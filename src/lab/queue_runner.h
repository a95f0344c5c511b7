// The experiment queue's runner: takes queued experiments in id order and trains each as a
// `clocklm train` child process on the device, one at a time, recording every attempt's device
// time and writing the journal entry of each finished experiment. Started on demand: a submission
// (or a look at the queue) starts one in the background when work is waiting and none runs.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "lab/queue.h"

namespace clm {

// The `clocklm train` arguments of an experiment's next attempt (resume when its run has a
// checkpoint), without the executable.
std::vector<std::string> experiment_train_args(const Experiment& e, bool resume);

// Runs experiments until none is queued; returns how many attempts it ran, or -1 when another
// runner is active. The training child gets SIGTERM if the runner dies, so it checkpoints and the
// experiment can resume. `exe`: the clocklm executable ("" = this one).
int run_queue(ExperimentQueue& q, const std::string& exe = "", std::FILE* log = stderr);

// Starts `exe exp run --queue DIR` in the background (output in QUEUE/runner.log) when experiments
// are queued and no runner is active. Returns whether it started one.
bool ensure_runner(ExperimentQueue& q, const std::string& exe = "");

}  // namespace clm

// Runner of the experiment queue (see queue_runner.h). The queue's state lives in files, so the
// runner keeps nothing in memory that a crash could lose: a runner killed at any point leaves each
// experiment either finished, queued to resume from its checkpoint, or failed with the reason
// (settled by the next process that looks at the queue).
#include "lab/queue_runner.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "core/common.h"
#include "lab/journal.h"
#include "lab/process.h"
#include "profile/runinfo.h"
#include "lab/sweep.h"

namespace clm {

std::vector<std::string> experiment_train_args(const Experiment& e, bool resume) {
  // The same command a sweep would run for this variant.
  SweepSpec s;
  s.config = e.spec.config;
  s.data = e.spec.data;
  s.budget = e.spec.budget;
  s.profile = e.spec.profile;
  if (e.spec.device != "auto") s.args = {"--device", e.spec.device};
  SweepRun r{e.id, e.spec.sets};
  return sweep_train_args(s, r, e.run_dir(), resume);
}

int run_queue(ExperimentQueue& q, const std::string& exe_in, std::FILE* log) {
  const std::string exe = exe_in.empty() ? self_exe() : exe_in;
  make_dirs(q.dir());
  int ran = 0;
  while (true) {
    std::optional<RunnerLock> lock = RunnerLock::try_acquire(q.dir());
    if (!lock) return ran > 0 ? ran : -1;
    atomic_write(
        q.dir() + "/runner.json",
        nlohmann::json{{"pid", ::getpid()}, {"started", utc_now_iso8601()}, {"exe", exe}}.dump() +
            "\n");
    while (std::optional<Experiment> e = q.claim_next(::getpid())) {
      bool resume = e->state["attempts"].back().value("resumed", false);
      auto args = experiment_train_args(*e, resume);
      std::fprintf(log, "%s %s: %s %s\n", utc_now_iso8601().c_str(), e->id.c_str(),
                   resume ? "resuming" : "starting",
                   run_record([&] {
                     std::vector<std::string> all{exe};
                     all.insert(all.end(), args.begin(), args.end());
                     return all;
                   }())["command"]
                       .get<std::string>()
                       .c_str());
      std::fflush(log);
      SpawnOptions so;
      so.output = e->log_path();
      so.stdin_null = true;
      so.parent_death_signal = SIGTERM;  // the trainer checkpoints and stops on SIGTERM
      int rc;
      try {
        pid_t child = spawn_process(exe, args, so);
        q.set_child(e->id, child);
        rc = wait_process(child);
      } catch (const Error& err) {
        atomic_write(e->dir + "/spawn-error.txt", std::string(err.what()) + "\n");
        rc = 127;
      }
      Experiment f = q.finish_attempt(e->id, rc);
      ++ran;
      std::fprintf(log, "%s %s: %s%s%s\n", utc_now_iso8601().c_str(), f.id.c_str(),
                   f.status().c_str(), f.state.value("reason", "").empty() ? "" : ": ",
                   f.state.value("reason", "").c_str());
      std::fflush(log);
      if (f.status() == "done") {
        try {
          record_journal_entry(q, f);
        } catch (const std::exception& err) {
          std::fprintf(log, "%s: journal entry not written: %s\n", f.id.c_str(), err.what());
        }
      }
    }
    std::remove((q.dir() + "/runner.json").c_str());
    lock.reset();
    // Work submitted after the last claim but before the lock was released found the lock held
    // and started no runner: look once more.
    if (!q.has_queued()) return ran;
  }
}

bool ensure_runner(ExperimentQueue& q, const std::string& exe_in) {
  if (!q.exists() || q.runner_active() || !q.has_queued()) return false;
  const std::string exe = exe_in.empty() ? self_exe() : exe_in;
  spawn_detached(exe, {"exp", "run", "--queue", std::filesystem::absolute(q.dir()).string()},
                 q.dir() + "/runner.log");
  return true;
}

}  // namespace clm

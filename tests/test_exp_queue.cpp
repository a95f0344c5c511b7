// The experiment queue through the `clocklm exp` command line: submit, run, results, journal and
// the ledger; concurrent submissions from two processes; the device-time cap; cancelling; and a
// runner killed with SIGKILL (alone: the experiment resumes from its checkpoint; together with its
// training process before any checkpoint: the experiment is marked failed with the reason).
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/common.h"
#include "lab/process.h"
#include "test_cli_util.h"
#include "test_exp_util.h"

using namespace clm;
using cli_test::run_clocklm;
using cli_test::run_cmd;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

class ExpQueue : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("clocklm_test_exp_queue_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    data = exp_test::make_tiny_dataset(dir);
    queue = (dir / "q").string();
  }
  void TearDown() override { fs::remove_all(dir); }

  // `clocklm exp SUB --queue Q ARGS`; returns the exit status, output in *out.
  int exp(const std::string& sub, const std::string& args, std::string* out = nullptr) {
    return run_clocklm("exp " + sub + " --queue " + queue + " " + args, out);
  }
  std::string submit_args(const std::string& extra, const std::string& budget = "60s") {
    return "--config d4" + exp_test::tiny_model_args() + " --data " + data + " --budget " + budget +
           " --no-run " + extra;
  }
  json status(const std::string& id) {
    std::string out;
    EXPECT_EQ(exp("status", id + " --json", &out), 0) << out;
    return json::parse(out);
  }
  // Runs `clocklm exp run` in a session of its own (so the test can kill it, or it and its child).
  pid_t start_runner() {
    SpawnOptions so;
    so.output = (dir / "runner.out").string();
    return spawn_process("/usr/bin/setsid", {CLOCKLM_BINARY, "exp", "run", "--queue", queue}, so);
  }
  // Waits until RUN/metrics.jsonl of `id` holds at least one row.
  void wait_for_metrics(const std::string& id) {
    std::string m = queue + "/" + id + "/run/metrics.jsonl";
    for (int i = 0; i < 600; ++i) {
      if (path_exists(m) && read_file(m).find('\n') != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    FAIL() << "no metrics row appeared in " << m;
  }
  // Polls status until the experiment is no longer running (the killed runner's child may still be
  // checkpointing for a moment, and holds the runner lock until it exits).
  json wait_not_running(const std::string& id) {
    json s;
    for (int i = 0; i < 600; ++i) {
      s = status(id);
      if (s["experiment"]["state"] != "running") return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "still running: " << s.dump();
    return s;
  }

  fs::path dir;
  std::string data, queue;
};

}  // namespace

TEST_F(ExpQueue, SubmitRunResultsJournalAndLedger) {
  std::string out;
  ASSERT_EQ(
      exp("submit",
          submit_args("--set train.max_steps=4 --hypothesis 'the tiny model learns' --name base"),
          &out),
      0)
      << out;
  EXPECT_NE(out.find("exp-0001 queued"), std::string::npos) << out;
  ASSERT_EQ(exp("submit",
                submit_args("--set train.max_steps=4 --set optim.matrix.lr=0.01 --baseline "
                            "exp-0001 --hypothesis 'a lower matrix lr is as good'"),
                &out),
            0)
      << out;
  EXPECT_EQ(status("exp-0002")["experiment"]["state"], "queued");
  ASSERT_EQ(exp("run", "", &out), 0) << out;
  EXPECT_NE(out.find("ran 2 attempt(s)"), std::string::npos) << out;

  double total = 0;
  for (const char* id : {"exp-0001", "exp-0002"}) {
    json s = status(id)["experiment"];
    EXPECT_EQ(s["state"], "done") << s.dump();
    EXPECT_EQ(s["steps"], 4);
    EXPECT_GT(s["device_seconds"].get<double>(), 0);
    // One attempt: the ledger charges exactly what the trainer measured.
    json summary = json::parse(read_file(queue + "/" + id + "/run/summary.json"));
    EXPECT_DOUBLE_EQ(s["device_seconds"].get<double>(), summary["device_seconds"].get<double>());
    total += summary["device_seconds"].get<double>();
  }
  json q = status("")["queue"];
  EXPECT_NEAR(q["ledger"]["spent_device_seconds"].get<double>(), total, 1e-9);
  EXPECT_EQ(q["ledger"]["reserved_device_seconds"].get<double>(), 0);
  EXPECT_EQ(q["counts"]["done"], 2);

  ASSERT_EQ(exp("results", "exp-0002 --json --tail 3", &out), 0) << out;
  json r = json::parse(out);
  EXPECT_TRUE(r["summary"]["val_bpb"].is_number());
  EXPECT_EQ(r["metrics_tail"].size(), 3u);
  EXPECT_EQ(r["journal"]["hypothesis"], "a lower matrix lr is as good");
  EXPECT_EQ(r["journal"]["baseline"]["ref"], "exp-0001");
  ASSERT_TRUE(r["journal"]["delta"].is_object()) << r["journal"].dump();
  EXPECT_NEAR(
      r["journal"]["delta"]["val_bpb"].get<double>(),
      r["summary"]["val_bpb"].get<double>() - r["journal"]["baseline"]["val_bpb"].get<double>(),
      1e-12);
  ASSERT_EQ(r["journal"]["config_diff"].size(), 1u) << r["journal"].dump();
  EXPECT_EQ(r["journal"]["config_diff"][0]["key"], "optim.matrix.lr");
  EXPECT_TRUE(path_exists(queue + "/exp-0002/journal.json"));  // recorded by the runner

  ASSERT_EQ(exp("journal", "", &out), 0) << out;
  std::string md = read_file(queue + "/journal.md");
  EXPECT_NE(md.find("the tiny model learns"), std::string::npos);
  EXPECT_NE(md.find("Δ val bpb"), std::string::npos);
  EXPECT_NE(md.find("| optim.matrix.lr | 0.02 | 0.01 |"), std::string::npos) << md;
  EXPECT_TRUE(path_exists(queue + "/journal-leaderboard.svg"));
  ASSERT_EQ(exp("list", "", &out), 0);
  EXPECT_NE(out.find("exp-0002"), std::string::npos);
}

TEST_F(ExpQueue, ConcurrentSubmissionsFromTwoProcessesGetDistinctIds) {
  const int per = 6;
  std::string one =
      std::string(CLOCKLM_BINARY) + " exp submit --queue " + queue + " " + submit_args("--name");
  std::string script;
  for (const char* who : {"a", "b"})
    script += fmt::format("(for i in $(seq {}); do {} {}$i >/dev/null || echo FAILED; done) & ",
                          per, one, who);
  auto r = run_cmd("bash -c '" + script + "wait'");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
  std::string out;
  ASSERT_EQ(exp("list", "--json", &out), 0) << out;
  std::set<std::string> ids, names;
  size_t p = 0, nl;
  while ((nl = out.find('\n', p)) != std::string::npos) {
    json e = json::parse(out.substr(p, nl - p));
    p = nl + 1;
    ids.insert(e["id"].get<std::string>());
    names.insert(e["name"].get<std::string>());
    EXPECT_EQ(e["state"], "queued");
  }
  EXPECT_EQ(ids.size(), size_t(2 * per));
  EXPECT_EQ(names.size(), size_t(2 * per));  // every submission kept, none overwritten
  EXPECT_EQ(*ids.rbegin(), fmt::format("exp-{:04d}", 2 * per));
}

TEST_F(ExpQueue, LedgerCapRefusesSubmissionsPastIt) {
  std::string out;
  ASSERT_EQ(exp("init", "--cap 100s --data " + data, &out), 0) << out;
  ASSERT_EQ(exp("submit", submit_args("--hypothesis first", "60s"), &out), 0) << out;
  EXPECT_EQ(exp("submit", submit_args("--hypothesis second", "60s"), &out), 1);
  EXPECT_NE(out.find("clocklm: error: device-time cap reached: this experiment asks for 1m00s"),
            std::string::npos)
      << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;  // one line
  json q = status("")["queue"]["ledger"];
  EXPECT_EQ(q["cap_device_seconds"], 100.0);
  EXPECT_EQ(q["reserved_device_seconds"], 60.0);
  EXPECT_EQ(q["remaining_device_seconds"], 40.0);
  ASSERT_EQ(exp("submit", submit_args("--hypothesis third", "40s"), &out), 0)
      << out;  // exactly fits
  // Cancelling gives the reservation back; removing the cap accepts anything.
  ASSERT_EQ(exp("cancel", "exp-0001", &out), 0) << out;
  EXPECT_EQ(status("")["queue"]["ledger"]["remaining_device_seconds"], 60.0);
  ASSERT_EQ(exp("init", "--cap none", &out), 0) << out;
  ASSERT_EQ(exp("submit", submit_args("--hypothesis fourth", "5h"), &out), 0) << out;
}

TEST_F(ExpQueue, CancelAndBadInputAreOneLineErrors) {
  std::string out;
  ASSERT_EQ(exp("submit", submit_args("--hypothesis h"), &out), 0) << out;
  ASSERT_EQ(exp("cancel", "1", &out), 0) << out;
  EXPECT_EQ(status("exp-0001")["experiment"]["state"], "cancelled");
  EXPECT_EQ(exp("cancel", "exp-0001", &out), 1);
  EXPECT_NE(out.find("clocklm: error: experiment exp-0001 has already finished (cancelled)"),
            std::string::npos)
      << out;
  EXPECT_EQ(exp("status", "exp-0042", &out), 1);
  EXPECT_NE(out.find("no experiment 'exp-0042'"), std::string::npos) << out;
  EXPECT_EQ(exp("submit", submit_args("--set model.no_such_key=1"), &out), 1);
  EXPECT_NE(out.find("clocklm: error: "), std::string::npos) << out;
  EXPECT_EQ(exp("submit", "--config d4 --budget 1m --data " + (dir / "nowhere").string(), &out), 1);
  EXPECT_NE(out.find("clocklm: error: "), std::string::npos) << out;
  ASSERT_EQ(exp("run", "", &out), 0) << out;
  EXPECT_NE(out.find("ran 0 attempt(s)"), std::string::npos) << out;
}

TEST_F(ExpQueue, RunnerKilledWithSigkillLeavesTheExperimentResumable) {
  std::string out;
  // A budget of device time, not steps: the run is still going when the runner is killed.
  ASSERT_EQ(exp("submit", submit_args("--hypothesis 'survives a dead runner'", "3s"), &out), 0)
      << out;
  pid_t runner = start_runner();
  wait_for_metrics("exp-0001");
  ASSERT_EQ(::kill(runner, SIGKILL), 0);
  wait_process(runner);
  // The training child gets SIGTERM from the kernel, checkpoints and exits; the next look at the
  // queue queues the experiment again to resume from that checkpoint.
  json s = wait_not_running("exp-0001")["experiment"];
  if (s["state"] == "done") GTEST_SKIP() << "the run finished before the runner was killed";
  ASSERT_EQ(s["state"], "queued") << s.dump();
  EXPECT_NE(s["note"].get<std::string>().find("queued to resume from its checkpoint"),
            std::string::npos)
      << s.dump();
  EXPECT_EQ(s["attempts"], 1);
  double first = s["device_seconds"].get<double>();
  EXPECT_GT(first, 0);

  ASSERT_EQ(exp("run", "", &out), 0) << out;
  s = status("exp-0001")["experiment"];
  EXPECT_EQ(s["state"], "done") << s.dump();
  EXPECT_EQ(s["attempts"], 2);
  json state = json::parse(read_file(queue + "/exp-0001/state.json"));
  EXPECT_TRUE(state["attempts"][1]["resumed"].get<bool>());
  // Both attempts are charged: at least what the finished run records (work redone after the
  // checkpoint counts twice, as it was spent twice).
  json summary = json::parse(read_file(queue + "/exp-0001/run/summary.json"));
  EXPECT_GE(s["device_seconds"].get<double>() + 1e-9, summary["device_seconds"].get<double>());
  EXPECT_NE(read_file(queue + "/exp-0001/train.log").find("resumed"), std::string::npos);
}

TEST_F(ExpQueue, RunnerAndTrainerKilledBeforeACheckpointIsMarkedFailed) {
  std::string out;
  ASSERT_EQ(exp("submit", submit_args("--hypothesis 'dies young'", "30s"), &out), 0) << out;
  pid_t runner = start_runner();
  wait_for_metrics("exp-0001");
  ASSERT_EQ(::kill(-runner, SIGKILL), 0);  // the whole session: runner and trainer
  wait_process(runner);
  json s = wait_not_running("exp-0001")["experiment"];
  ASSERT_EQ(s["state"], "failed") << s.dump();
  EXPECT_NE(s["reason"].get<std::string>().find(
                "stopped during attempt 1 before the run wrote a checkpoint"),
            std::string::npos)
      << s.dump();
  EXPECT_GT(s["device_seconds"].get<double>(), 0);  // what it spent is still on the ledger
  EXPECT_GT(status("")["queue"]["ledger"]["spent_device_seconds"].get<double>(), 0);
}

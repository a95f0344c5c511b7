// Crash safety of a training run, through the CLI on a tiny model: a run killed with SIGKILL at
// many moments (mid checkpoint write, mid `latest` update, mid metrics rewrite, at random times)
// and resumed each time ends bit-identical to an uninterrupted run; a non-finite loss names the
// step and keeps the last good checkpoint; SIGTERM/SIGINT checkpoint and say how to resume; a
// failed write (file-size limit) leaves the previous files intact; a second writer of a run folder
// is refused; a model too large for the machine is refused before allocating.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "backend/backend.h"
#include "config/config.h"
#include "core/common.h"
#include "core/file_lock.h"
#include "model/gpt.h"
#include "test_cli_util.h"
#include "test_run_util.h"

using namespace clm;
using namespace run_test;
using cli_test::CmdResult;
using cli_test::run_cmd;
namespace fs = std::filesystem;

namespace {

// 12 deterministic steps, a checkpoint every 2 steps (each step is 1/12 of the 1h budget).
const std::string kSteps = " --set max_steps=12 --set eval_every_seconds=0 --set checkpoint_every_seconds=600"
                           " --set keep_checkpoints=2";

std::string train_cmd(const std::string& run, bool resume) {
  const std::string bin = CLOCKLM_BINARY;
  if (resume) return bin + " train --resume " + run + " --data " + tiny_dataset() + " --quiet";
  return bin + " train" + kTiny + kSteps + " --data " + tiny_dataset() + " --budget 1h --out " + run;
}

// Files a killed writer may leave: temp files of atomic writes.
std::vector<std::string> temp_files(const std::string& run) {
  std::vector<std::string> out;
  for (auto& e : fs::recursive_directory_iterator(run))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) out.push_back(e.path().string());
  return out;
}

std::vector<double> losses(const std::string& run) {
  std::vector<double> v;
  for (auto& row : read_metrics(run))
    if (row.contains("loss")) v.push_back(row["loss"].get<double>());
  return v;
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0; }

// Reads the pid a run's lock file records, waiting up to ~60 s for the run to take the lock.
pid_t wait_for_lock_pid(const std::string& run) {
  for (int i = 0; i < 600; ++i) {
    std::error_code ec;
    if (fs::exists(run + "/.lock", ec)) {
      std::string s = read_file(run + "/.lock");
      if (!s.empty() && s.back() == '\n') return pid_t(std::stol(s));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

}  // namespace

TEST(Recovery, KilledAndDivergedRunsResumeBitExact) {
  const std::string ref = temp_run("ref"), run = temp_run("killed");
  CmdResult r = run_cmd(train_cmd(ref, false));
  ASSERT_EQ(r.status, 0) << r.out;

  // Each attempt: fault settings (or a timeout that SIGKILLs the process at a random moment) and
  // whether the process must die. Attempts go on (resuming) until a run finishes.
  struct Attempt {
    std::string env;
    double kill_after;  // seconds; 0 = none
  };
  const std::vector<Attempt> attempts = {
      {"CLOCKLM_FAULT=kill-in-write:.ckpt:2", 0},        // torn second checkpoint (step 4)
      {"CLOCKLM_FAULT=kill-in-write:metrics.jsonl:1", 0},  // while trimming the log on resume
      {"CLOCKLM_FAULT=kill-in-write:latest:1", 0},        // checkpoint written, `latest` not moved
      {"CLOCKLM_FAULT=nan-loss:3", 0},                    // diverges: must keep the last good one
      {"", 0.4},
      {"", 1.1},
      {"", 1.7},
      {"CLOCKLM_FAULT=kill-in-write:summary.json:1", 0},  // finished training, killed writing summary
  };
  bool fresh = true, saw_divergence = false;
  for (const Attempt& a : attempts) {
    std::string cmd = train_cmd(run, !fresh);
    if (a.kill_after > 0) cmd = fmt::format("timeout -s KILL {} {}", a.kill_after, cmd);
    if (!a.env.empty()) cmd = a.env + " " + cmd;
    CmdResult k = run_cmd(cmd);
    fresh = false;
    if (fs::exists(run + "/summary.json")) break;  // a timer attempt may have let the run finish
    EXPECT_NE(k.status, 0) << cmd << "\n" << k.out;
    if (a.env.find("nan-loss") != std::string::npos) {
      // The third step of this process diverged: the message names the step and the checkpoint kept.
      saw_divergence = true;
      EXPECT_NE(k.out.find("training diverged: loss is nan"), std::string::npos) << k.out;
      EXPECT_NE(k.out.find("last good checkpoint kept: step_"), std::string::npos) << k.out;
      EXPECT_TRUE(fs::exists(latest_ckpt(run))) << k.out;
    }
  }
  EXPECT_TRUE(saw_divergence);
  for (int i = 0; i < 10 && !fs::exists(run + "/summary.json"); ++i) {
    CmdResult fin = run_cmd(train_cmd(run, true));
    ASSERT_EQ(fin.status, 0) << fin.out;
  }
  ASSERT_TRUE(fs::exists(run + "/summary.json"));

  // Bit for bit: weights and optimizer state, the loss of every step, the final val bpb.
  EXPECT_TRUE(checkpoint_payload(latest_ckpt(ref)) == checkpoint_payload(latest_ckpt(run)))
      << "final weights/optimizer state differ";
  EXPECT_EQ(losses(ref), losses(run));
  auto sa = nlohmann::json::parse(read_file(ref + "/summary.json"));
  auto sb = nlohmann::json::parse(read_file(run + "/summary.json"));
  EXPECT_EQ(sa["val_bpb"].get<double>(), sb["val_bpb"].get<double>());
  EXPECT_EQ(sb["steps"], 12);
  // Nothing a killed writer left behind survives, and keep_checkpoints still holds.
  EXPECT_TRUE(temp_files(run).empty()) << temp_files(run).front();
  int ckpts = 0;
  for (auto& e : fs::directory_iterator(run + "/checkpoints")) ckpts += e.path().extension() == ".ckpt";
  EXPECT_LE(ckpts, 2);
  fs::remove_all(ref);
  fs::remove_all(run);
}

TEST(Recovery, ResumeBeforeTheFirstCheckpointStartsOver) {
  const std::string run = temp_run("nockpt");
  // Killed in its very first checkpoint write: the folder has a config and a log, no checkpoint.
  CmdResult k = run_cmd("CLOCKLM_FAULT=kill-in-write:.ckpt:1 " + train_cmd(run, false));
  EXPECT_NE(k.status, 0) << k.out;
  ASSERT_FALSE(fs::exists(run + "/checkpoints/latest"));
  CmdResult r = run_cmd(train_cmd(run, true));
  ASSERT_EQ(r.status, 0) << r.out;
  auto s = nlohmann::json::parse(read_file(run + "/summary.json"));
  EXPECT_EQ(s["steps"], 12);
  EXPECT_EQ(losses(run).size(), 12u);
  fs::remove_all(run);
}

TEST(Recovery, SignalsCheckpointAndSayHowToResume) {
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string run = temp_run(fmt::format("sig{}", sig)), log = run + ".log";
    // In the background, so this process can signal it; its exit status lands in the log.
    const std::string long_run = std::string(CLOCKLM_BINARY) + " train" + kTiny +
                                 " --set max_steps=1000000 --set eval_every_seconds=0 --data " + tiny_dataset() +
                                 " --budget 1h --out " + run;
    ASSERT_EQ(std::system(("(" + long_run + " > " + log + " 2>&1; echo \"rc=$?\" >> " + log + ") &").c_str()), 0);
    const pid_t pid = wait_for_lock_pid(run);
    ASSERT_GT(pid, 0);
    // Wait for training proper (a logged step), so the signal lands inside the loop.
    for (int i = 0; i < 600 && (!fs::exists(run + "/metrics.jsonl") || read_metrics(run).empty()); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    // A second writer of the same folder is refused while the run holds it.
    CmdResult second = run_cmd(train_cmd(run, true));
    EXPECT_NE(second.status, 0);
    EXPECT_NE(second.out.find(fmt::format("is in use by another clocklm process (pid {})", pid)), std::string::npos)
        << second.out;
    ASSERT_EQ(::kill(pid, sig), 0);
    for (int i = 0; i < 600 && process_alive(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (int i = 0; i < 100 && read_file(log).find("rc=") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string out = read_file(log);
    EXPECT_NE(out.find("rc=1"), std::string::npos) << out;
    EXPECT_NE(out.find("checkpoint saved, resume with --resume " + run), std::string::npos) << out;
    ASSERT_TRUE(fs::exists(latest_ckpt(run))) << out;
    auto meta_step = read_metrics(run).back()["step"].get<int64_t>();
    EXPECT_NE(latest_ckpt(run).find(fmt::format("step_{:08d}", meta_step)), std::string::npos);
    // The lock went with the process: resuming works (one more step, then stop).
    CmdResult again = run_cmd(train_cmd(run, true) + " --stop-after-steps 1");
    EXPECT_EQ(again.status, 0) << again.out;
    fs::remove_all(run);
    fs::remove(log);
  }
}

TEST(Recovery, FailedWriteKeepsThePreviousCheckpoint) {
  const std::string run = temp_run("fsize");
  CmdResult first = run_cmd(train_cmd(run, false) + " --stop-after-steps 2");
  ASSERT_EQ(first.status, 0) << first.out;
  const std::string ckpt = latest_ckpt(run), before = read_file(ckpt);
  const std::string latest_before = read_file(run + "/checkpoints/latest");
  // A file-size limit well below a checkpoint: the small run files fit, the next checkpoint not.
  const size_t limit_kb = before.size() / 2048;
  ASSERT_GT(limit_kb, 16u);
  CmdResult full = run_cmd(fmt::format("ulimit -f {} && {}", limit_kb, train_cmd(run, true)));
  EXPECT_EQ(full.status, 1) << full.out;
  EXPECT_NE(full.out.find("clocklm: error: cannot write"), std::string::npos) << full.out;
  EXPECT_NE(full.out.find("File too large"), std::string::npos) << full.out;
  EXPECT_EQ(read_file(run + "/checkpoints/latest"), latest_before);
  EXPECT_TRUE(read_file(ckpt) == before);
  EXPECT_TRUE(temp_files(run).empty()) << temp_files(run).front();
  CmdResult fin = run_cmd(train_cmd(run, true));
  EXPECT_EQ(fin.status, 0) << fin.out;
  EXPECT_TRUE(fs::exists(run + "/summary.json"));
  fs::remove_all(run);
}

TEST(Recovery, FileLockIsExclusiveAndReleasedWithItsHolder) {
  const std::string path = temp_run("lock") + ".lock";
  {
    FileLock a(path, "thing A");
    try {
      FileLock b(path, "thing A");
      ADD_FAILURE() << "a second lock on the same file was granted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("thing A is in use by another clocklm process (pid {})",
                                                       getpid())),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(FileLock c(path, "thing A"));
  fs::remove(path);
}

TEST(Recovery, ModelTooLargeForTheMachineIsRefusedBeforeAllocating) {
  const std::string run = temp_run("huge");
  // ~10^12 parameters: far beyond any machine; refused at once, in one line.
  CmdResult r = run_cmd(std::string(CLOCKLM_BINARY) + " train" + kTiny +
                        " --set n_layer=64 --set d_model=65536 --set n_head=512 --set n_kv_head=512"
                        " --set head_dim=128 --data " +
                        tiny_dataset() + " --out " + run);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("needs about"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GiB of memory"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  fs::remove_all(run);

  // The estimate is the layout the constructor allocates: at least 10 bytes per parameter
  // (fp32 weights and gradients, bf16 mirror) plus activations that grow with the batch.
  ModelConfig m = load_config("d4", {"vocab_size=320", "seq_len=64"}).model;
  const size_t small = GPT::memory_need(m, 1, 64, cpu_backend()), big = GPT::memory_need(m, 8, 64, cpu_backend());
  EXPECT_GE(small, size_t(count_params(m).total()) * 10);
  EXPECT_GT(big, small);
  EXPECT_THROW(GPT(load_config("d4", {"vocab_size=320", "d_model=65536", "n_layer=64"}).model, 1, 64), Error);
}

// Multi-process training tests. In-process: the single-process communicator and the local launch
// command line. Through the CLI with two CPU ranks (skipped, with the reason, where MPI is not
// compiled in or mpirun is missing): two ranks of B rows equal one process with two micro-batches of
// B (losses, weights and val bpb bit for bit), `--nproc` equals `mpirun -n`, a two-rank resume is
// bit-exact and a resume with another rank count is refused, and the budget, a stop signal, a NaN
// loss and a killed rank each end both ranks together.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/common.h"
#include "checkpoint/checkpoint.h"
#include "dist/comm.h"
#include "dist/launch.h"
#ifdef CLOCKLM_HAVE_NCCL
#include "dist/comm_nccl.h"
#endif
#include "test_cli_util.h"
#include "test_run_util.h"

using namespace clm;
namespace fs = std::filesystem;

namespace {

using cli_test::CmdResult;
using cli_test::run_cmd;
using namespace run_test;

bool have_mpirun() { return run_cmd("command -v mpirun").status == 0; }

#define SKIP_WITHOUT_MPI()                                                                  \
  do {                                                                                      \
    if (!mpi_compiled()) GTEST_SKIP() << "this build has no MPI transport (libopenmpi-dev)"; \
    if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";           \
  } while (0)

// `mpirun -n 2` with what a test machine needs: more ranks than cores, and root in containers.
std::string mpirun2() {
  return std::string("mpirun -n 2 --oversubscribe --bind-to none") + (geteuid() == 0 ? " --allow-run-as-root" : "");
}

// One thread per process in every run compared, so each rank computes exactly what one process does.
std::string train_args(const std::string& out, int steps) {
  return " train" + kTiny + " --set train.threads=1 --set max_steps=" + std::to_string(steps) +
         " --set eval_every_seconds=0 --budget 1h --data " + tiny_dataset() + " --out " + out;
}

void expect_same_losses(const std::string& a, const std::string& b) {
  auto ma = read_metrics(a), mb = read_metrics(b);
  ASSERT_EQ(ma.size(), mb.size());
  int compared = 0;
  for (size_t i = 0; i < ma.size(); ++i) {
    if (!ma[i].contains("loss")) continue;
    EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << ma[i]["step"];
    EXPECT_EQ(ma[i]["grad_norm"].get<double>(), mb[i]["grad_norm"].get<double>()) << "step " << ma[i]["step"];
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

nlohmann::json summary_of(const std::string& run) { return nlohmann::json::parse(read_file(run + "/summary.json")); }

}  // namespace

TEST(Dist, SingleProcessCommunicatorLeavesDataAsItIs) {
  Comm& c = world_comm();
  EXPECT_EQ(c.world(), 1);
  EXPECT_EQ(c.rank(), 0);
  std::vector<float> v = {1.5f, -2.0f, 3.25f};
  c.all_reduce(v.data(), 3, ReduceOp::Sum);
  c.all_reduce_buckets(v.data(), 3, 2);
  EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  std::vector<float> out(3);
  c.reduce_scatter(v.data(), out.data(), 3);
  EXPECT_EQ(out, v);
  c.all_gather(v.data(), out.data(), 3);
  EXPECT_EQ(out, v);
  EXPECT_EQ(c.all_gather_strings("abc"), std::vector<std::string>{"abc"});
  EXPECT_TRUE(c.any(true));
  EXPECT_EQ(c.max(2.5), 2.5);
  c.barrier();
}

TEST(Dist, LocalLaunchCommandLine) {
  EXPECT_EQ(strip_nproc({"clocklm", "train", "--nproc", "2", "--data", "d", "--nproc=3", "--quiet"}),
            (std::vector<std::string>{"clocklm", "train", "--data", "d", "--quiet"}));
  auto cmd = local_launch_command("/usr/bin/mpirun", "/x/clocklm", 4, {"train", "--quiet"});
  ASSERT_GE(cmd.size(), 8u);
  EXPECT_EQ(cmd[0], "/usr/bin/mpirun");
  EXPECT_EQ(cmd[1], "-n");
  EXPECT_EQ(cmd[2], "4");
  EXPECT_NE(std::find(cmd.begin(), cmd.end(), "--oversubscribe"), cmd.end());
  EXPECT_EQ(cmd[cmd.size() - 3], "/x/clocklm");
  EXPECT_EQ(cmd.back(), "--quiet");
}

TEST(Dist, TransportsMatchTheBuild) {
  auto t = available_transports();
  EXPECT_EQ(t.front(), "single");
  EXPECT_EQ(std::find(t.begin(), t.end(), "mpi") != t.end(), mpi_compiled());
#ifdef CLOCKLM_HAVE_NCCL
  // Taking its address links the NCCL transport (and libnccl) into this binary.
  EXPECT_NE(&make_nccl_comm, nullptr);
  EXPECT_NE(std::find(t.begin(), t.end(), "nccl"), t.end());
#endif
}

TEST(DistTrain, TwoRanksEqualOneProcessWithTwoMicroBatches) {
  SKIP_WITHOUT_MPI();
  const std::string bin = CLOCKLM_BINARY, one = temp_run("dp_one"), two = temp_run("dp_two"),
                    nproc = temp_run("dp_nproc");
  // batch_tokens 512 = 2 micro-batches of 4 x 64: one process accumulates two, two ranks one each.
  CmdResult r1 = run_cmd(bin + train_args(one, 10));
  ASSERT_EQ(r1.status, 0) << r1.out;
  CmdResult r2 = run_cmd("timeout 300 " + mpirun2() + " " + bin + train_args(two, 10));
  ASSERT_EQ(r2.status, 0) << r2.out;
  CmdResult r3 = run_cmd("timeout 300 " + bin + train_args(nproc, 10) + " --nproc 2");
  ASSERT_EQ(r3.status, 0) << r3.out;
  EXPECT_EQ(last_line(r1.out), last_line(r2.out));  // val_bpb, printed by rank 0 only
  EXPECT_EQ(last_line(r1.out), last_line(r3.out));
  expect_same_losses(one, two);
  expect_same_losses(one, nproc);
  // Bit for bit: the final weights and optimizer state, and the (split) validation bpb.
  EXPECT_TRUE(checkpoint_payload(latest_ckpt(one)) == checkpoint_payload(latest_ckpt(two)));
  auto s1 = summary_of(one), s2 = summary_of(two);
  EXPECT_EQ(s1["val_bpb"].get<double>(), s2["val_bpb"].get<double>());
  EXPECT_EQ(s1["val"]["nats"].get<double>(), s2["val"]["nats"].get<double>());
  EXPECT_EQ(s2["ranks"], 2);
  EXPECT_EQ(s2["transport"], "mpi");
  EXPECT_GT(s2["comm_bytes"].get<double>(), 0);
  EXPECT_EQ(s1["tokens"], s2["tokens"]);
  // Only rank 0 wrote: one run.json, and its checkpoint holds both ranks' loader positions.
  auto meta = read_checkpoint_meta(latest_ckpt(two));
  ASSERT_EQ(meta["loaders"].size(), 2u);
  EXPECT_EQ(meta["world"], 2);
  EXPECT_EQ(meta["loaders"][1]["row"], meta["loaders"][0]["row"]);
  for (auto& d : {one, two, nproc}) fs::remove_all(d);
}

TEST(DistTrain, TwoRankResumeIsBitExactAndOtherRankCountsAreRefused) {
  SKIP_WITHOUT_MPI();
  const std::string bin = CLOCKLM_BINARY, a = temp_run("dp_full"), b = temp_run("dp_split");
  CmdResult ra = run_cmd("timeout 300 " + bin + train_args(a, 8) + " --nproc 2");
  ASSERT_EQ(ra.status, 0) << ra.out;
  CmdResult rb1 = run_cmd("timeout 300 " + bin + train_args(b, 8) + " --nproc 2 --stop-after-steps 4");
  ASSERT_EQ(rb1.status, 0) << rb1.out;
  // One process cannot continue a two-rank run: each rank's data position would be lost.
  CmdResult bad = run_cmd(bin + " train --resume " + b + " --data " + tiny_dataset() + " --quiet");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("2 rank(s) and this job has 1"), std::string::npos) << bad.out;
  CmdResult rb2 =
      run_cmd("timeout 300 " + bin + " train --resume " + b + " --data " + tiny_dataset() + " --quiet --nproc 2");
  ASSERT_EQ(rb2.status, 0) << rb2.out;
  EXPECT_EQ(last_line(ra.out), last_line(rb2.out));
  expect_same_losses(a, b);
  EXPECT_TRUE(checkpoint_payload(latest_ckpt(a)) == checkpoint_payload(latest_ckpt(b)));
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(DistTrain, BudgetSignalAndNanEndBothRanksTogether) {
  SKIP_WITHOUT_MPI();
  const std::string bin = CLOCKLM_BINARY, run = temp_run("dp_stop");
  // The budget: both ranks stop at the same step and the job ends normally (a rank that stopped
  // alone would leave the other in a collective until the timeout).
  std::string base = " train" + kTiny + " --set train.threads=1 --set eval_every_seconds=0 --data " + tiny_dataset();
  CmdResult rb = run_cmd("timeout 300 " + bin + base + " --budget 2s --nproc 2 --out " + run + "_budget");
  ASSERT_EQ(rb.status, 0) << rb.out;
  EXPECT_EQ(summary_of(run + "_budget")["stop_reason"], "budget");
  // A stop signal that only rank 1 receives stops both after the same step, with a checkpoint.
  CmdResult rs = run_cmd("CLOCKLM_FAULT=signal-at-step:3@1 timeout 300 " + bin + base +
                         " --set max_steps=50 --budget 1h --nproc 2 --out " + run + "_signal");
  EXPECT_NE(rs.status, 0) << rs.out;
  EXPECT_NE(rs.out.find("interrupted at step 3"), std::string::npos) << rs.out;
  auto meta = read_checkpoint_meta(latest_ckpt(run + "_signal"));
  EXPECT_EQ(meta["step"], 3);
  EXPECT_EQ(meta["loaders"].size(), 2u);
  // A NaN loss on rank 1 only: both ranks stop with the divergence error naming the step.
  CmdResult rn = run_cmd("CLOCKLM_FAULT=nan-loss:4@1 timeout 300 " + bin + base +
                         " --set max_steps=50 --budget 1h --nproc 2 --out " + run + "_nan");
  EXPECT_NE(rn.status, 0) << rn.out;
  EXPECT_NE(rn.out.find("training diverged"), std::string::npos) << rn.out;
  EXPECT_NE(rn.out.find("on rank 1"), std::string::npos) << rn.out;
  EXPECT_NE(rn.out.find("at step 3"), std::string::npos) << rn.out;
  for (const char* s : {"_budget", "_signal", "_nan"}) fs::remove_all(run + s);
}

TEST(DistTrain, AKilledRankEndsTheOtherWithAnErrorNamingIt) {
  SKIP_WITHOUT_MPI();
  const std::string bin = CLOCKLM_BINARY, run = temp_run("dp_kill");
  // `timeout 30`: the surviving rank must be gone well within 30 s (status 124 would mean a hang).
  CmdResult r = run_cmd("CLOCKLM_FAULT=kill-at-step:3@1 timeout 30 " + bin + " train" + kTiny +
                        " --set train.threads=1 --set max_steps=1000 --budget 1h --data " + tiny_dataset() +
                        " --nproc 2 --out " + run);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.status, 124) << "the surviving rank did not end within 30 s\n" << r.out;
  EXPECT_NE(r.out.find("rank 1"), std::string::npos) << r.out;
  fs::remove_all(run);
}

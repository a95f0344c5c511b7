// Multi-process training tests. In-process: the single-process communicator and the local launch
// command line. Through the CLI with two CPU ranks (skipped, with the reason, where MPI is not
// compiled in or mpirun is missing): two ranks of B rows equal one process with two micro-batches of
// B (losses, weights and val bpb bit for bit, with the optimizer sharded or not), `--nproc` equals
// `mpirun -n`, a two-rank resume is bit-exact with two ranks or one, and the budget, a stop signal,
// a NaN loss and a killed rank each end both ranks together.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/common.h"
#include "checkpoint/checkpoint.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "dist/launch.h"
#include "dist/watchdog.h"
#include "optim/optim.h"
#ifdef CLOCKLM_HAVE_NCCL
#include "dist/comm_nccl.h"
#endif
#include "test_cli_util.h"
#include "test_core_util.h"
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
  c.reduce_scatter(v.data(), {3});
  c.all_gather(v.data(), {3});
  c.reduce_scatter_buckets(v.data(), {0, 3}, 2);
  c.all_gather_buckets(v.data(), {0, 3}, 2);
  EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_EQ(c.all_gather_strings("abc"), std::vector<std::string>{"abc"});
  EXPECT_TRUE(c.any(true));
  EXPECT_EQ(c.max(2.5), 2.5);
  c.barrier();
}

TEST(Dist, ShardedBucketsCutEachRanksRange) {
  // Ranks own [0,5), [5,5) (nothing) and [5,12); buckets of 4 floats.
  std::vector<std::pair<int64_t, std::vector<int64_t>>> got;
  for_each_sharded_bucket({0, 5, 5, 12}, 3, 4, [&](int64_t off, const std::vector<int64_t>& c) { got.push_back({off, c}); });
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], (std::pair<int64_t, std::vector<int64_t>>{0, {4, 0, 0}}));
  EXPECT_EQ(got[1], (std::pair<int64_t, std::vector<int64_t>>{4, {1, 0, 3}}));
  EXPECT_EQ(got[2], (std::pair<int64_t, std::vector<int64_t>>{8, {0, 0, 4}}));
  EXPECT_THROW(for_each_sharded_bucket({0, 5}, 3, 4, [](int64_t, const std::vector<int64_t>&) {}), Error);
}

TEST(Dist, PartitionByCostBalancesContiguousShares) {
  EXPECT_EQ(partition_by_cost({1, 1, 1, 1}, 2), (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(partition_by_cost({1, 1, 1, 1}, 1), (std::vector<size_t>{0, 4}));
  // One expensive item: it sits alone on one side of the cut.
  EXPECT_EQ(partition_by_cost({10, 1, 1, 1, 1}, 2), (std::vector<size_t>{0, 1, 5}));
  EXPECT_EQ(partition_by_cost({1, 1, 1, 1, 10}, 2), (std::vector<size_t>{0, 4, 5}));
  // More ranks than items: some shares are empty, the bounds never go back.
  auto b = partition_by_cost({5, 5}, 4);
  ASSERT_EQ(b.size(), 5u);
  EXPECT_EQ(b.front(), 0u);
  EXPECT_EQ(b.back(), 2u);
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
  EXPECT_EQ(partition_by_cost({}, 2), (std::vector<size_t>{0, 0, 0}));
}

TEST(Dist, LoaderStatesAreDealtAnewForAnotherRankCount) {
  auto st = [](int world, uint64_t row) {
    return nlohmann::json{{"version", 1}, {"split", "train"}, {"T", 64}, {"seed", 1}, {"world", world},
                          {"shuffle", true}, {"rows", 100}, {"tokens", 6500}, {"row", row}};
  };
  // Two ranks at row 8 (B = 4) read the stream's first 16 rows: one rank continues at 16, four at 4.
  auto one = DataLoader::resplit_state({st(2, 8), st(2, 8)}, 1, 4);
  EXPECT_EQ(one["row"], 16);
  EXPECT_EQ(one["world"], 1);
  EXPECT_EQ(DataLoader::resplit_state({st(2, 8), st(2, 8)}, 4, 4)["row"], 4);
  EXPECT_EQ(DataLoader::resplit_state({st(1, 16)}, 2, 4)["row"], 8);
  // 16 rows are not whole batches of 4 for 3 ranks; ranks at different rows cannot be merged.
  EXPECT_THROW(DataLoader::resplit_state({st(2, 8), st(2, 8)}, 3, 4), Error);
  EXPECT_THROW(DataLoader::resplit_state({st(2, 8), st(2, 4)}, 1, 4), Error);
  EXPECT_THROW(DataLoader::resplit_state({st(2, 8)}, 1, 4), Error);  // a state missing
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
  // Both score CORE at the end (items split over the ranks) on a small synthetic bundle.
  const std::string bundle = (fs::temp_directory_path() / fmt::format("clocklm_dp_core_{}", getpid())).string();
  core_test::write_core_bundle(bundle, false);
  CmdResult r1 = run_cmd(bin + train_args(one, 10) + " --core " + bundle);
  ASSERT_EQ(r1.status, 0) << r1.out;
  CmdResult r2 = run_cmd("timeout 300 " + mpirun2() + " " + bin + train_args(two, 10) + " --core " + bundle);
  ASSERT_EQ(r2.status, 0) << r2.out;
  // The default shards the optimizer (ZeRO-1, distributed Muon); this run keeps it whole on each rank.
  CmdResult r3 = run_cmd("timeout 300 " + bin + train_args(nproc, 10) + " --set optim.shard_state=false --nproc 2");
  ASSERT_EQ(r3.status, 0) << r3.out;
  EXPECT_EQ(last_line(r1.out), last_line(r2.out));  // val_bpb, printed by rank 0 only
  EXPECT_EQ(last_line(r1.out), last_line(r3.out));
  expect_same_losses(one, two);
  expect_same_losses(one, nproc);
  // Bit for bit: the final weights and optimizer state (gathered from both ranks' shares), and the
  // (split) validation bpb.
  EXPECT_TRUE(checkpoint_payload(latest_ckpt(one)) == checkpoint_payload(latest_ckpt(two)));
  EXPECT_TRUE(checkpoint_payload(latest_ckpt(one)) == checkpoint_payload(latest_ckpt(nproc)));
  auto s1 = summary_of(one), s2 = summary_of(two);
  EXPECT_EQ(s1["val_bpb"].get<double>(), s2["val_bpb"].get<double>());
  EXPECT_EQ(s1["val"]["nats"].get<double>(), s2["val"]["nats"].get<double>());
  EXPECT_EQ(s2["ranks"], 2);
  EXPECT_EQ(s2["transport"], "mpi");
  EXPECT_GT(s2["comm_bytes"].get<double>(), 0);
  EXPECT_EQ(s1["tokens"], s2["tokens"]);
  // CORE from two ranks: the same counts per task, so the same score, and the stage-2 score with it.
  ASSERT_TRUE(s2.contains("core")) << s2.dump();
  for (const char* t : {"mc", "sc", "lm"}) {
    EXPECT_EQ(s1["core"]["tasks"][t]["correct"], s2["core"]["tasks"][t]["correct"]) << t;
    EXPECT_EQ(s1["core"]["tasks"][t]["n"], 9) << t;
    EXPECT_EQ(s1["core"]["tasks"][t]["forward_tokens"], s2["core"]["tasks"][t]["forward_tokens"]) << t;
  }
  EXPECT_EQ(s1["core"]["core"].get<double>(), s2["core"]["core"].get<double>());
  EXPECT_EQ(s1["stage2"]["score"].get<double>(), s2["stage2"]["score"].get<double>());
  EXPECT_DOUBLE_EQ(s2["stage2"]["score"].get<double>(),
                   0.5 * (1 - s2["val_bpb"].get<double>()) + 0.5 * s2["core"]["core"].get<double>());
  // Only rank 0 wrote: one run.json, and its checkpoint holds both ranks' loader positions.
  auto meta = read_checkpoint_meta(latest_ckpt(two));
  ASSERT_EQ(meta["loaders"].size(), 2u);
  EXPECT_EQ(meta["world"], 2);
  EXPECT_EQ(meta["loaders"][1]["row"], meta["loaders"][0]["row"]);
  for (auto& d : {one, two, nproc, bundle}) fs::remove_all(d);
}

TEST(DistTrain, TwoRankResumeIsBitExactWithTwoRanksOrOne) {
  SKIP_WITHOUT_MPI();
  const std::string bin = CLOCKLM_BINARY, a = temp_run("dp_full"), b = temp_run("dp_split"),
                    c = temp_run("dp_shrink");
  CmdResult ra = run_cmd("timeout 300 " + bin + train_args(a, 8) + " --nproc 2");
  ASSERT_EQ(ra.status, 0) << ra.out;
  CmdResult rb1 = run_cmd("timeout 300 " + bin + train_args(b, 8) + " --nproc 2 --stop-after-steps 4");
  ASSERT_EQ(rb1.status, 0) << rb1.out;
  fs::copy(b, c, fs::copy_options::recursive);
  CmdResult rb2 =
      run_cmd("timeout 300 " + bin + " train --resume " + b + " --data " + tiny_dataset() + " --quiet --nproc 2");
  ASSERT_EQ(rb2.status, 0) << rb2.out;
  EXPECT_EQ(last_line(ra.out), last_line(rb2.out));
  expect_same_losses(a, b);
  EXPECT_TRUE(checkpoint_payload(latest_ckpt(a)) == checkpoint_payload(latest_ckpt(b)));
  // One process continues the two-rank run: the rows read so far are dealt anew, the sharded
  // optimizer state was saved whole, and one process with two micro-batches computes what two
  // ranks do, so it ends bit for bit where the two-rank run ends.
  CmdResult rc = run_cmd("timeout 300 " + bin + " train --resume " + c + " --data " + tiny_dataset());
  ASSERT_EQ(rc.status, 0) << rc.out;
  EXPECT_NE(rc.out.find("written by 2 rank(s); continuing with 1"), std::string::npos) << rc.out;
  EXPECT_EQ(last_line(ra.out), last_line(rc.out));
  EXPECT_TRUE(checkpoint_payload(latest_ckpt(a)) == checkpoint_payload(latest_ckpt(c)));
  for (auto& d : {a, b, c}) fs::remove_all(d);
}

TEST(DistTrain, ShardedNorMuonEqualsOneProcess) {
  // NorMuon keeps per-row second moments beside each matrix's momentum: the shares, their
  // gathering for the checkpoint and the update must all carry them.
  SKIP_WITHOUT_MPI();
  const std::string bin = CLOCKLM_BINARY, one = temp_run("nm_one"), two = temp_run("nm_two");
  const std::string nm = " --set optim.matrix.kind=normuon";
  CmdResult r1 = run_cmd(bin + train_args(one, 6) + nm);
  ASSERT_EQ(r1.status, 0) << r1.out;
  CmdResult r2 = run_cmd("timeout 300 " + bin + train_args(two, 6) + nm + " --nproc 2");
  ASSERT_EQ(r2.status, 0) << r2.out;
  EXPECT_EQ(last_line(r1.out), last_line(r2.out));
  expect_same_losses(one, two);
  EXPECT_TRUE(checkpoint_payload(latest_ckpt(one)) == checkpoint_payload(latest_ckpt(two)));
  for (auto& d : {one, two}) fs::remove_all(d);
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

TEST(DistTrain, CheckpointWritesStayOffEveryRanksClock) {
  SKIP_WITHOUT_MPI();
  const std::string bin = CLOCKLM_BINARY, run = temp_run("dp_ckpt_clock");
  // A checkpoint after every step (deterministic cadence: 900 budget-seconds a step), and rank 0's
  // disk takes 2.5 s per checkpoint. Writing is off the clock in one process, so it must be on every
  // rank: rank 1 waits at the checkpoint's barrier, not in the next step's collective, and the
  // budget used (the slowest rank's step times) stays that of four tiny steps, far below the 7.5 s
  // the three periodic writes take. (Four tiny steps take ~0.7 s in the sanitizer build, ~1.7 s when
  // other tests share its two cores: hence the margin on both sides of the 3 s bound.)
  CmdResult r = run_cmd("CLOCKLM_FAULT=slow-write:.ckpt:2500@0 timeout 300 " + bin + " train" + kTiny +
                        " --set train.threads=1 --set max_steps=4 --set eval_every_seconds=0"
                        " --set checkpoint_every_seconds=900 --set keep_checkpoints=5 --budget 1h --data " +
                        tiny_dataset() + " --nproc 2 --out " + run);
  ASSERT_EQ(r.status, 0) << r.out;
  int ckpts = 0;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints")) ckpts += e.path().extension() == ".ckpt";
  EXPECT_EQ(ckpts, 4) << "a checkpoint after each step, the last being the final one";
  EXPECT_LT(summary_of(run)["device_seconds"].get<double>(), 3.0) << r.out;
  fs::remove_all(run);
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

TEST(DistTrain, AStuckRankEndsTheJobThroughTheCollectiveWatchdog) {
  SKIP_WITHOUT_MPI();
  const std::string bin = CLOCKLM_BINARY, run = temp_run("dp_hang");
  // Rank 1 stops making progress at step 3 without dying; rank 0 waits in the step's all-reduce,
  // gives up after the 3 s watchdog timeout, and mpirun ends the stuck rank.
  const double t0 = now_seconds();
  CmdResult r = run_cmd("CLOCKLM_FAULT=hang-at-step:3@1 CLOCKLM_COLLECTIVE_TIMEOUT=3 timeout 60 " + bin + " train" +
                        kTiny + " --set train.threads=1 --set max_steps=1000 --budget 1h --data " + tiny_dataset() +
                        " --nproc 2 --out " + run);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.status, 124) << "the job did not end within 60 s\n" << r.out;
  EXPECT_LT(now_seconds() - t0, 60.0);
  EXPECT_NE(r.out.find("rank 0 of 2: waited"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("one is stuck or gone"), std::string::npos) << r.out;
  fs::remove_all(run);
}

TEST(Dist, CollectiveTimeoutIsReadStrictly) {
  ::setenv("CLOCKLM_COLLECTIVE_TIMEOUT", "12.5", 1);
  EXPECT_EQ(collective_timeout_seconds(), 12.5);
  ::setenv("CLOCKLM_COLLECTIVE_TIMEOUT", "soon", 1);
  EXPECT_THROW(collective_timeout_seconds(), Error);
  ::setenv("CLOCKLM_COLLECTIVE_TIMEOUT", "-1", 1);
  EXPECT_THROW(collective_timeout_seconds(), Error);
  ::unsetenv("CLOCKLM_COLLECTIVE_TIMEOUT");
  EXPECT_EQ(collective_timeout_seconds(), 900);
}

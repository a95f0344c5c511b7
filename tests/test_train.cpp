// Training-loop tests on tiny models: overfitting a short repeated text with Muon and with all-AdamW;
// and, through the CLI on a tiny prepared dataset: the run directory and its files, the budget
// clock stopping within one step, schedules following the budget fraction, bit-exact resume,
// refused corrupt/truncated/mismatched checkpoints, divergence and bad-vocab errors.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/backend.h"
#include "core/common.h"
#include "test_cli_util.h"
#include "test_run_util.h"
#include "data/dataset.h"
#include "config/config.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "tok/train.h"
#include "train/schedule.h"
#include "train/trainer.h"
#include "test_counting_backend_util.h"

using namespace clm;
namespace fs = std::filesystem;

namespace {

using cli_test::CmdResult;
using cli_test::run_cmd;
using namespace run_test;

// Overfit one fixed batch of a short repeated "text" (a cycle of 24 distinct ids): every next token
// is determined by the current one, so the loss must go to ~0.
float overfit(const std::string& matrix_kind) {
  RunConfig c = load_config("d4", {"n_layer=2", "d_model=64", "n_head=2", "n_kv_head=2", "head_dim=32",
                                   "vocab_size=64", "seq_len=32", "micro_batch=4", "batch_tokens=128",
                                   "matrix.kind=" + matrix_kind});
  if (matrix_kind == "adamw") c.optim.matrix.lr = 0.01f;
  else c.optim.matrix.lr = 0.05f;
  c.optim.embed.lr = 0.05f;
  c.optim.head.lr = 0.02f;
  const int B = 4, T = 32, steps = 80;
  GPT model(c.model, B, T);
  model.init_weights(3);
  Optimizer opt(model.params(), c.optim);
  std::vector<int32_t> cycle(24);
  Rng rng(9);
  std::vector<int32_t> ids(64);
  for (int i = 0; i < 64; ++i) ids[i] = i;
  for (int i = 63; i > 0; --i) std::swap(ids[i], ids[rng.next() % uint64_t(i + 1)]);
  for (int i = 0; i < 24; ++i) cycle[i] = ids[i];
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      in[b * T + t] = cycle[(b * 5 + t) % 24];
      tg[b * T + t] = cycle[(b * 5 + t + 1) % 24];
    }
  TrainConfig tc = c.train;
  for (int s = 0; s < steps; ++s) {
    ScheduleValues sv = schedule_at(tc, c.optim.matrix.momentum, double(s) / steps);
    model.zero_grad();
    model.forward(in.data(), tg.data(), B, T);
    model.backward(1.0f);
    opt.step(sv.lr_scale, sv.wd_scale, sv.muon_momentum);
  }
  return model.forward(in.data(), tg.data(), B, T);
}

// The tiny config with `sets` for `steps` steps, straight through into `full` and, into `split`,
// stopped after `stop` steps and resumed; false (with the failure reported) if a command failed.
bool run_straight_and_resumed(const std::string& sets, int steps, int stop, const std::string& full,
                              const std::string& split) {
  const std::string bin = CLOCKLM_BINARY;
  const std::string common = bin + " train" + kTiny + " --set max_steps=" + std::to_string(steps) +
                             " --set eval_every_seconds=0" + sets + " --data " + tiny_dataset() + " --budget 1h";
  for (const std::string& cmd : {common + " --out " + full, common + " --out " + split + " --stop-after-steps " +
                                 std::to_string(stop), bin + " train --resume " + split + " --data " +
                                 tiny_dataset() + " --quiet"}) {
    CmdResult r = run_cmd(cmd);
    if (r.status != 0) {
      ADD_FAILURE() << cmd << "\n" << r.out;
      return false;
    }
  }
  return true;
}

// The tiny config with `sets` is refused before anything runs: a non-zero exit and one line that
// contains `names`.
void expect_refused_in_one_line(const std::string& sets, const std::string& names, const std::string& tag) {
  CmdResult bad = run_cmd(std::string(CLOCKLM_BINARY) + " train" + kTiny + sets + " --data " + tiny_dataset() +
                          " --budget 1m --out " + temp_run(tag));
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find(names), std::string::npos) << bad.out;
  EXPECT_EQ(std::count(bad.out.begin(), bad.out.end(), '\n'), 1) << bad.out;
}

}  // namespace

TEST(TrainOverfit, MuonReachesNearZeroLoss) {
  float loss = overfit("muon");
  EXPECT_LT(loss, 0.05f) << "ln(64) = 4.16 at the start";
}

TEST(TrainOverfit, AllAdamWReachesNearZeroLoss) {
  float loss = overfit("adamw");
  EXPECT_LT(loss, 0.05f) << "ln(64) = 4.16 at the start";
}

TEST(TrainCli, BudgetRunWritesRunDirectoryAndStopsWithinOneStep) {
  const std::string run = temp_run("budget"), bin = CLOCKLM_BINARY;
  const double budget = 3.0;
  // One thread: on a loaded machine two spinning OpenMP threads can stretch a step past the whole
  // budget, and the checks below need several steps.
  CmdResult r = run_cmd(bin + " train" + kTiny +
                        " --set train.threads=1 --set eval_every_seconds=1 --set warmdown_frac=0.5 --data " +
                        tiny_dataset() + " --budget 3s --out " + run);
  ASSERT_EQ(r.status, 0) << r.out;
  std::string last = last_line(r.out);
  ASSERT_EQ(last.rfind("val_bpb ", 0), 0u) << r.out;
  double bpb = std::stod(last.substr(8));
  EXPECT_TRUE(std::isfinite(bpb) && bpb > 0 && bpb < 8) << bpb;

  for (const char* f : {"config.json", "run.json", "metrics.jsonl", "summary.json", "checkpoints/latest"})
    EXPECT_TRUE(fs::exists(run + "/" + f)) << f;
  auto summary = nlohmann::json::parse(read_file(run + "/summary.json"));
  for (const char* k : {"val_bpb", "val", "steps", "tokens", "device_seconds", "params", "tokens_per_second",
                        "config", "model_flops_per_second"})
    EXPECT_TRUE(summary.contains(k)) << k;
  EXPECT_NEAR(summary["val_bpb"].get<double>(), bpb, 1e-6);  // printed with 6 decimals
  EXPECT_EQ(summary["config"], "d4");
  EXPECT_TRUE(summary["val"].contains("tokens"));
  auto cfg = nlohmann::json::parse(read_file(run + "/config.json"));
  EXPECT_EQ(cfg["model"]["vocab_size"], 320);  // from the tokenizer
  EXPECT_NO_THROW(run_config_from_json(cfg));
  auto rec = nlohmann::json::parse(read_file(run + "/run.json"));
  EXPECT_TRUE(rec.contains("dataset"));
  // The backend and the precision that `auto` resolved to on this machine are on record.
  const std::string want_prec = cpu_backend().native_bf16() ? "bf16" : "fp32";
  EXPECT_EQ(rec.value("matmul_precision", ""), want_prec);
  EXPECT_EQ(summary.value("matmul_precision", ""), want_prec);
  EXPECT_EQ(rec.value("device", "").rfind("cpu", 0), 0u) << rec.dump();

  auto rows = read_metrics(run);
  std::vector<nlohmann::json> steps;
  bool saw_val = false;
  for (auto& row : rows) {
    if (row.contains("val_bpb")) saw_val = true;
    if (row.contains("loss")) steps.push_back(row);
  }
  EXPECT_TRUE(saw_val);
  ASSERT_GE(steps.size(), 2u) << r.out;
  EXPECT_EQ(int64_t(steps.size()), summary["steps"].get<int64_t>());
  double max_step = 0, prev_used = 0;
  TrainConfig tc = load_config(run + "/config.json").train;
  for (auto& row : steps) {
    for (const char* k : {"step", "tokens", "device_seconds", "loss", "lr", "grad_norm", "tokens_per_second",
                          "model_flops_per_second"})
      ASSERT_TRUE(row.contains(k)) << k << " in " << row.dump();
    max_step = std::max(max_step, row["step_seconds"].get<double>());
    // The schedule is the one of the budget fraction at the start of the step.
    float want = schedule_at(tc, 0.95f, prev_used / budget).lr_scale;
    EXPECT_NEAR(row["lr"].get<double>(), want, 1e-6) << row.dump();
    prev_used = row["device_seconds"].get<double>();
  }
  double used = summary["device_seconds"].get<double>();
  EXPECT_DOUBLE_EQ(used, prev_used);
  EXPECT_LE(used, budget + max_step);  // never more than one step past the budget
  EXPECT_GT(used, budget - max_step);  // and never stopped while a whole step still fitted
  // The last step ran deep in the warmdown: its lr multiplier is small.
  EXPECT_LT(steps.back()["lr"].get<double>(), 2.0 * max_step / budget / 0.5 + 1e-6);

  // The run folder is not silently overwritten.
  CmdResult again = run_cmd(bin + " train" + kTiny + " --data " + tiny_dataset() + " --budget 1s --out " + run);
  EXPECT_NE(again.status, 0);
  EXPECT_NE(again.out.find("already holds a run"), std::string::npos) << again.out;
  fs::remove_all(run);
}

TEST(TrainCli, ResumeIsBitExactAndBadCheckpointsAreRefused) {
  const std::string bin = CLOCKLM_BINARY, a = temp_run("full"), b = temp_run("split");
  const std::string common = bin + " train" + kTiny + " --set max_steps=8 --set eval_every_seconds=0 --data " +
                             tiny_dataset() + " --budget 1h";
  CmdResult ra = run_cmd(common + " --out " + a);
  ASSERT_EQ(ra.status, 0) << ra.out;
  CmdResult rb1 = run_cmd(common + " --out " + b + " --stop-after-steps 4");
  ASSERT_EQ(rb1.status, 0) << rb1.out;
  EXPECT_NE(rb1.out.find("stopped at step 4"), std::string::npos) << rb1.out;
  EXPECT_FALSE(fs::exists(b + "/summary.json"));
  const std::string mid = latest_ckpt(b), saved = b + "/mid.ckpt";
  fs::copy_file(mid, saved);

  CmdResult rb2 = run_cmd(bin + " train --resume " + b + " --data " + tiny_dataset() + " --quiet");
  ASSERT_EQ(rb2.status, 0) << rb2.out;
  EXPECT_EQ(last_line(ra.out), last_line(rb2.out));  // the same val_bpb, printed to 6 digits

  // 4 + 4 steps == 8 steps: identical loss curve, weights and optimizer state, bit for bit.
  auto ma = read_metrics(a), mb = read_metrics(b);
  ASSERT_EQ(ma.size(), mb.size());
  for (size_t i = 0; i < ma.size(); ++i) {
    EXPECT_EQ(ma[i]["step"], mb[i]["step"]);
    if (ma[i].contains("loss")) {
      EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << ma[i]["step"];
      EXPECT_EQ(ma[i]["grad_norm"].get<double>(), mb[i]["grad_norm"].get<double>());
      EXPECT_EQ(ma[i]["lr"].get<double>(), mb[i]["lr"].get<double>());
    }
  }
  EXPECT_TRUE(checkpoint_payload(latest_ckpt(a)) == checkpoint_payload(latest_ckpt(b)))
      << "final weights/optimizer state differ";
  auto sa = nlohmann::json::parse(read_file(a + "/summary.json"));
  auto sb = nlohmann::json::parse(read_file(b + "/summary.json"));
  EXPECT_EQ(sa["val_bpb"].get<double>(), sb["val_bpb"].get<double>());
  EXPECT_EQ(sb["steps"], 8);

  // Refusals, each a single line and a non-zero exit; the run is left as it was.
  auto refuse = [&](const std::string& extra, const std::string& want) {
    CmdResult r = run_cmd(bin + " train --resume " + b + " --data " + tiny_dataset() + " --quiet" + extra);
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_EQ(r.out.rfind("clocklm: error: ", 0), 0u) << r.out;
  };
  std::string blob = read_file(saved);
  const std::string target = latest_ckpt(b);
  // Another config (model shape changes the hash).
  fs::copy_file(saved, target, fs::copy_options::overwrite_existing);
  refuse(" --set model.n_layer=3", "different config");
  // A flipped byte in the weights.
  std::string bad = blob;
  bad[bad.size() / 2] ^= 0x40;
  atomic_write(target, bad);
  refuse("", "corrupt");
  // Truncated.
  atomic_write(target, blob.substr(0, blob.size() - 100));
  refuse("", "truncated");
  // Not a checkpoint at all.
  atomic_write(target, "hello");
  refuse("", "truncated");
  atomic_write(target, std::string(200, 'x'));
  refuse("", "not a clocklm checkpoint");
  fs::remove_all(a);
  fs::remove_all(b);
}

// train.seq_schedule: the first steps read the loader's rows as shorter ones, the metrics say
// which, the run is still bit-exact across a resume that crosses the change, and the final
// evaluation uses the full rows.
TEST(TrainCli, RowLengthScheduleSwitchesAndResumes) {
  const std::string bin = CLOCKLM_BINARY, a = temp_run("seqfull"), b = temp_run("seqsplit");
  ASSERT_TRUE(run_straight_and_resumed(" --set train.seq_schedule=16@0.25,32@0.5", 8, 3, a, b));
  auto ma = read_metrics(a), mb = read_metrics(b);
  ASSERT_EQ(ma.size(), mb.size());
  std::vector<int> lens;
  for (size_t i = 0; i < ma.size(); ++i) {
    if (!ma[i].contains("loss")) continue;
    lens.push_back(ma[i]["seq_len"].get<int>());
    EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << ma[i]["step"];
    EXPECT_EQ(ma[i]["seq_len"], mb[i]["seq_len"]);
  }
  EXPECT_EQ(lens, (std::vector<int>{16, 16, 32, 32, 64, 64, 64, 64}));  // fraction at each step's start
  // The same init and data with full rows: the third step's loss differs only because the rows of
  // the first two were cut (the head and the blocks' output projections start at zero, so the
  // attention first reaches the loss at step 3).
  const std::string c = temp_run("seqnone");
  CmdResult rc = run_cmd(bin + " train" + kTiny + " --set max_steps=8 --set eval_every_seconds=0 --data " +
                         tiny_dataset() + " --budget 1h --stop-after-steps 3 --out " + c);
  ASSERT_EQ(rc.status, 0) << rc.out;
  const auto mc = read_metrics(c);
  EXPECT_FALSE(mc[0].contains("seq_len"));
  EXPECT_NE(mc[2]["loss"].get<double>(), ma[2]["loss"].get<double>());
  fs::remove_all(c);
  auto sa = nlohmann::json::parse(read_file(a + "/summary.json"));
  auto sb = nlohmann::json::parse(read_file(b + "/summary.json"));
  EXPECT_EQ(sa["val_bpb"].get<double>(), sb["val_bpb"].get<double>());
  // Attention over shorter rows costs fewer FLOPs than the full rows' count for every token.
  EXPECT_LT(sa["model_flops_per_second"].get<double>() * sa["device_seconds"].get<double>(),
            sa["flops_per_token"].get<double>() * sa["tokens"].get<double>());
  // A length that does not divide model.seq_len is refused before anything runs.
  expect_refused_in_one_line(" --set train.seq_schedule=24@0.5", "train.seq_schedule '24@0.5'", "seqbad");
  fs::remove_all(a);
  fs::remove_all(b);
}

// train.batch_schedule: the first steps take fewer of the loader's micro-batches (starting with the
// first), the metrics say how many tokens each step had, the token count adds up, and the run is
// bit-exact across a resume that crosses the change.
TEST(TrainCli, BatchSizeScheduleSwitchesAndResumes) {
  const std::string bin = CLOCKLM_BINARY, a = temp_run("bsfull"), b = temp_run("bssplit");
  // kTiny: micro-batches of 4 x 64 = 256 tokens, 512 tokens per step.
  ASSERT_TRUE(run_straight_and_resumed(" --set train.batch_schedule=256@0.5", 8, 3, a, b));
  auto ma = read_metrics(a), mb = read_metrics(b);
  ASSERT_EQ(ma.size(), mb.size());
  std::vector<int64_t> sizes;
  int64_t last_tokens = 0;
  for (size_t i = 0; i < ma.size(); ++i) {
    if (!ma[i].contains("loss")) continue;
    sizes.push_back(ma[i]["batch_tokens"].get<int64_t>());
    EXPECT_EQ(ma[i]["tokens"].get<int64_t>() - last_tokens, sizes.back()) << "step " << ma[i]["step"];
    last_tokens = ma[i]["tokens"].get<int64_t>();
    EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << ma[i]["step"];
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{256, 256, 256, 256, 512, 512, 512, 512}));  // fraction at each step's start
  auto sa = nlohmann::json::parse(read_file(a + "/summary.json"));
  auto sb = nlohmann::json::parse(read_file(b + "/summary.json"));
  EXPECT_EQ(sa["tokens"].get<int64_t>(), 4 * 256 + 4 * 512);
  EXPECT_EQ(sa["val_bpb"].get<double>(), sb["val_bpb"].get<double>());
  // The first step trains on the first micro-batch alone and the second step reads the second: the
  // second step's loss is that of a run of 256-token steps, not that of the unscheduled run (whose
  // first step averaged both micro-batches). The first losses all agree: the zero-initialised head
  // gives every token the uniform distribution.
  const std::string c = temp_run("bssmall"), d = temp_run("bsnone");
  const std::string two = bin + " train" + kTiny + " --set max_steps=8 --set eval_every_seconds=0 --data " +
                          tiny_dataset() + " --budget 1h --stop-after-steps 2";
  ASSERT_EQ(run_cmd(two + " --set batch_tokens=256 --out " + c).status, 0);
  ASSERT_EQ(run_cmd(two + " --out " + d).status, 0);
  const auto mc = read_metrics(c), md = read_metrics(d);
  ASSERT_GE(mc.size(), 2u);
  ASSERT_GE(md.size(), 2u);
  EXPECT_EQ(mc[1]["loss"].get<double>(), ma[1]["loss"].get<double>());
  EXPECT_NE(md[1]["loss"].get<double>(), ma[1]["loss"].get<double>());
  EXPECT_FALSE(md[0].contains("batch_tokens"));
  fs::remove_all(c);
  fs::remove_all(d);
  // A stage that is not a whole number of micro-batches is refused before anything runs.
  expect_refused_in_one_line(" --set train.batch_schedule=300@0.5", "train.batch_schedule '300@0.5'", "bsbad");
  fs::remove_all(a);
  fs::remove_all(b);
}

// A run with the multi-token head logs its loss on every step, resumes to the bit, and its
// checkpoint evaluates like any other (the head is not part of the scored model).
TEST(TrainCli, MultiTokenHeadTrainsResumesAndEvaluates) {
  const std::string bin = CLOCKLM_BINARY, a = temp_run("mtpfull"), b = temp_run("mtpsplit");
  ASSERT_TRUE(run_straight_and_resumed(" --set model.mtp_weight=0.3", 6, 2, a, b));
  auto ma = read_metrics(a), mb = read_metrics(b);
  ASSERT_EQ(ma.size(), mb.size());
  int steps = 0;
  for (size_t i = 0; i < ma.size(); ++i) {
    if (!ma[i].contains("loss")) continue;
    ++steps;
    const double mtp = ma[i]["mtp_loss"].get<double>();
    EXPECT_TRUE(std::isfinite(mtp) && mtp > 0) << "step " << ma[i]["step"];
    EXPECT_EQ(mtp, mb[i]["mtp_loss"].get<double>()) << "step " << ma[i]["step"];
    EXPECT_EQ(ma[i]["loss"].get<double>(), mb[i]["loss"].get<double>()) << "step " << ma[i]["step"];
  }
  EXPECT_EQ(steps, 6);
  const std::string js = a + "/eval.json";
  CmdResult ev = run_cmd(bin + " eval bpb --checkpoint " + a + " --data " + tiny_dataset() + " --val-tokens 1000 --json " + js);
  ASSERT_EQ(ev.status, 0) << ev.out;
  const double bpb = nlohmann::json::parse(read_file(js))["bpb"].get<double>();
  EXPECT_TRUE(std::isfinite(bpb) && bpb > 0) << ev.out;
  expect_refused_in_one_line(" --set model.mtp_weight=-1", "model.mtp_weight", "mtpbad");
  fs::remove_all(a);
  fs::remove_all(b);
}

// Where `auto` precision is decided by timing (AVX512_BF16 without AMX), the verdict is kept in the
// cache folder, so every later process on the machine (a resume, an evaluation, another rank)
// multiplies in the same precision as the first.
TEST(TrainCli, MeasuredPrecisionIsCachedForTheMachine) {
  const std::string bin = CLOCKLM_BINARY, cache = temp_run("cache"), a = temp_run("prec1"), b = temp_run("prec2");
  fs::create_directories(cache);
  const std::string cmd = "XDG_CACHE_HOME=" + cache + " " + bin + " train" + kTiny +
                          " --set max_steps=1 --set eval_every_seconds=0 --data " + tiny_dataset() + " --budget 1h --out ";
  CmdResult r1 = run_cmd(cmd + a);
  ASSERT_EQ(r1.status, 0) << r1.out;
  const auto run1 = nlohmann::json::parse(read_file(a + "/run.json"));
  if (run1["device"].get<std::string>().find("measured at") == std::string::npos) {
    fs::remove_all(cache);
    fs::remove_all(a);
    GTEST_SKIP() << "this CPU decides bf16 without timing: " << run1["device"];
  }
  std::vector<fs::path> files;
  for (auto& e : fs::recursive_directory_iterator(cache))
    if (e.path().filename().string().starts_with("bf16-choice-")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  const auto cached = nlohmann::json::parse(read_file(files[0].string()));
  EXPECT_EQ(cached["bf16_faster"].get<bool>(), run1["matmul_precision"] == "bf16");
  // The second process takes the cached verdict, even one it would not measure itself.
  const bool flipped = !cached["bf16_faster"].get<bool>();
  atomic_write(files[0].string(),
               nlohmann::json{{"bf16_faster", flipped}, {"fp32_over_bf16_time", 9.5}}.dump());
  CmdResult r2 = run_cmd(cmd + b);
  ASSERT_EQ(r2.status, 0) << r2.out;
  const auto run2 = nlohmann::json::parse(read_file(b + "/run.json"));
  EXPECT_EQ(run2["matmul_precision"], flipped ? "bf16" : "fp32");
  EXPECT_NE(run2["device"].get<std::string>().find("9.50x"), std::string::npos) << run2["device"];
  fs::remove_all(cache);
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(TrainCli, BadInputsGiveOneLineErrors) {
  const std::string bin = CLOCKLM_BINARY, run = temp_run("bad");
  auto one_line_error = [&](const std::string& args, const std::string& want) {
    CmdResult r = run_cmd(bin + " train" + args);
    EXPECT_NE(r.status, 0) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.out.rfind("clocklm: error: ", 0), 0u) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  };
  const std::string data = " --data " + tiny_dataset() + " --out " + run;
  one_line_error(kTiny + " --set vocab_size=100" + data, "smaller than the dataset tokenizer");
  one_line_error(kTiny + " --set n_layerz=2" + data, "unknown config key 'n_layerz'");
  one_line_error(kTiny + " --set n_head=3" + data, "not divisible");
  one_line_error(kTiny + " --set n_layer=0" + data, "model.n_layer");
  one_line_error(kTiny + " --budget -5m" + data, "negative duration");
  one_line_error(kTiny + " --data /nonexistent/dir --out " + run, "/nonexistent/dir");
  one_line_error(" --resume " + run + "_missing --data " + tiny_dataset(), "");
  one_line_error(kTiny + " --device tpu" + data, "--device 'tpu' is unknown");
  if (available_backends().size() == 1)  // no usable GPU here: cuda is refused in one line
    one_line_error(kTiny + " --device cuda" + data, "--device cuda");
  one_line_error(kTiny + " --device cuda:99" + data, "--device cuda:99");
  fs::remove_all(run);
}

TEST(TrainCli, DivergenceStopsWithAClearError) {
  const std::string bin = CLOCKLM_BINARY, run = temp_run("nan");
  CmdResult r = run_cmd(bin + " train" + kTiny + " --set embed.lr=1e38 --set head.lr=1e38 --set grad_clip=0" +
                        " --set max_steps=20 --data " + tiny_dataset() + " --budget 1h --out " + run);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("training diverged"), std::string::npos) << r.out;
  fs::remove_all(run);
}

TEST(TrainLoop, ReadsTheDeviceOnlyOnLoggedSteps) {
  // With train.log_every=4 and no periodic evaluation or checkpoint, a single-process run reads
  // nothing from the device on steps 1-3, 5-7, ... and once on steps 4, 8, 12 (for their metrics
  // rows), and never synchronizes; the rows are those of a run that reads every step (log_every=1),
  // bit for bit, NorMuon, two micro-batches, the multi-token head and clipping included.
  auto run_with = [](int log_every, const std::shared_ptr<Backend>& be, const std::string& name) {
    TrainOptions o;
    o.config = "d4";
    o.sets = {"n_layer=2", "d_model=64", "n_head=2", "n_kv_head=2", "head_dim=32", "seq_len=64",
              "micro_batch=4", "batch_tokens=512", "val_tokens=1024", "periodic_val_tokens=0",
              "checkpoint_every_seconds=0", "train.threads=2", "max_steps=13", "model.mtp_weight=0.3",
              "optim.matrix.kind=normuon", "grad_clip=0.5", fmt::format("log_every={}", log_every)};
    o.data_dir = tiny_dataset();
    o.out_dir = temp_run(name);
    o.budget_seconds = 3600;
    o.quiet = true;
    o.backend = be;
    train(o);
    auto rows = read_metrics(o.out_dir);
    fs::remove_all(o.out_dir);
    return rows;
  };
  auto counting = std::make_shared<test_util::CountingBackend>();
  const auto every4 = run_with(4, counting, "reads4");
  ASSERT_GE(counting->reads_per_step.size(), 12u);  // 13 steps: 12 whole intervals between them
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(counting->reads_per_step[i], (i + 1) % 4 == 0 ? 1 : 0) << "step " << i + 1;
    EXPECT_EQ(counting->syncs_per_step[i], 0) << "step " << i + 1;
  }
  const auto every1 = run_with(1, make_backend("cpu"), "reads1");
  int compared = 0;
  for (const auto& row : every4) {
    if (!row.contains("loss")) continue;
    const int64_t step = row["step"].get<int64_t>();
    ASSERT_LE(size_t(step), every1.size());
    const auto& same = every1[size_t(step) - 1];
    ASSERT_EQ(same["step"], row["step"]);
    for (const char* key : {"loss", "grad_norm", "mtp_loss", "lr", "tokens"})
      EXPECT_EQ(same[key], row[key]) << key << " at step " << step;
    ++compared;
  }
  EXPECT_EQ(compared, 3);  // steps 4, 8, 12 (13 is the last, unlogged: 13 % 4 != 0)
}

TEST(TrainCli, DivergenceBetweenLoggedStepsNamesItsStep) {
  // A step that diverges between metrics rows is reported at the next read with its own step, as
  // when every step is read.
  const std::string bin = CLOCKLM_BINARY;
  std::string said[2];
  for (int log_every : {1, 7}) {
    const std::string run = temp_run(fmt::format("nan{}", log_every));
    CmdResult r = run_cmd(bin + " train" + kTiny + " --set embed.lr=1e38 --set head.lr=1e38 --set grad_clip=0" +
                          fmt::format(" --set log_every={}", log_every) + " --set max_steps=20 --data " +
                          tiny_dataset() + " --budget 1h --out " + run);
    EXPECT_NE(r.status, 0) << r.out;
    const size_t at = r.out.find("training diverged");
    ASSERT_NE(at, std::string::npos) << r.out;
    said[log_every == 1 ? 0 : 1] = r.out.substr(at, r.out.find(';', at) - at);
    fs::remove_all(run);
  }
  EXPECT_EQ(said[0], said[1]);
}

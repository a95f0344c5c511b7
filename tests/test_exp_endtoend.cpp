// End to end through the real trainer (issue 5's "done when", scaled down): prepare a tiny
// dataset, train two tiny configs (one with --profile), then report, compare and rank them.
// Checks that the experiment tools read what the trainer actually writes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "core/common.h"
#include "data/prepare.h"
#include "exp/report.h"
#include "exp/roofline.h"
#include "exp/runs.h"
#include "train/trainer.h"

using namespace clm;
namespace fs = std::filesystem;

TEST(ExpEndToEnd, TrainTwiceProfileReportCompare) {
  fs::path d = fs::temp_directory_path() / ("clocklm_test_exp_e2e_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d / "text");
  // A cached roofline in a private cache folder, so --profile does not spend ~10 s measuring.
  ::setenv("XDG_CACHE_HOME", (d / "cache").c_str(), 1);
  Roofline roof;
  roof.cpu_model = "test";
  roof.threads = default_threads();
  roof.fp32_flops = 100e9;
  roof.bf16_flops = 200e9;
  roof.copy_bytes_per_s = roof.triad_bytes_per_s = 20e9;
  std::string cache = roofline_cache_path(roof.threads);
  make_dirs(fs::path(cache).parent_path().string());
  atomic_write(cache, to_json(roof).dump());

  std::string train_text, val_text;
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", "away", "home"};
  Rng rng(5);
  for (int i = 0; i < 3000; ++i) (i < 2600 ? train_text : val_text) += std::string(words[rng.next() % 12]) + (i % 13 == 12 ? ".\n" : " ");
  atomic_write((d / "text/train.txt").string(), train_text);
  atomic_write((d / "text/val.txt").string(), val_text);
  PrepareOptions po;
  po.inputs = {(d / "text/train.txt").string()};
  po.val_inputs = {(d / "text/val.txt").string()};
  po.vocab_size = 300;
  po.out = (d / "data").string();
  po.quiet = true;
  prepare_dataset(po);

  std::vector<std::string> tiny = {"model.n_layer=1", "model.d_model=64", "model.n_head=2", "model.n_kv_head=2",
                                   "model.head_dim=32", "model.seq_len=32", "train.max_steps=6",
                                   "train.batch_tokens=64", "train.micro_batch=2", "train.val_tokens=512",
                                   "train.periodic_val_tokens=256", "train.eval_every_seconds=20"};
  auto run = [&](const std::string& name, std::vector<std::string> extra, bool profile) {
    TrainOptions o;
    o.config = "d4";
    o.sets = tiny;
    o.sets.insert(o.sets.end(), extra.begin(), extra.end());
    o.data_dir = (d / "data").string();
    o.out_dir = (d / "runs" / name).string();
    o.budget_seconds = 60;
    o.profile = profile;
    o.quiet = true;
    o.argv = {"clocklm", "train", "--out", o.out_dir};
    return train(o);
  };
  TrainResult a = run("muon", {}, true);
  TrainResult b = run("adamw", {"optim.matrix.kind=adamw", "optim.matrix.lr=0.003"}, false);
  ASSERT_TRUE(a.finished);
  ASSERT_TRUE(b.finished);

  std::vector<std::string> errors;
  auto runs = load_runs((d / "runs").string(), &errors);
  ASSERT_TRUE(errors.empty()) << errors[0];
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& r : runs) {
    EXPECT_TRUE(r.finished()) << r.dir;
    EXPECT_DOUBLE_EQ(r.steps(), 6);
    EXPECT_TRUE(std::isfinite(r.val_bpb()));
    EXPECT_GT(r.params(), 0);
    EXPECT_EQ(r.run["machine"]["cores"].get<int>() > 0, true);
    EXPECT_GE(r.series("device_seconds", "loss").size(), 6u);
  }
  const RunData& m = runs[0].name == "muon" ? runs[0] : runs[1];
  EXPECT_DOUBLE_EQ(m.val_bpb(), a.val_bpb);
  EXPECT_TRUE(path_exists(m.dir + "/profile/trace.json"));
  auto trace = nlohmann::json::parse(read_file(m.dir + "/profile/trace.json"));
  EXPECT_GT(trace["traceEvents"].size(), 10u);

  ReportFiles rep = write_report(m);
  std::string md = read_file(rep.markdown);
  EXPECT_NE(md.find("## Profile"), std::string::npos);
  EXPECT_NE(md.find("## Validation"), std::string::npos);
  ReportFiles cmp = write_compare(runs, (d / "cmp").string());
  std::string cm = read_file(cmp.markdown);
  EXPECT_NE(cm.find("**optim.matrix.kind**"), std::string::npos);
  for (const auto& f : cmp.plots) EXPECT_GT(fs::file_size(f), 200u) << f;
  auto order = ranked(runs);
  EXPECT_LE(order[0]->val_bpb(), order[1]->val_bpb());
  ::unsetenv("XDG_CACHE_HOME");
  fs::remove_all(d);
}

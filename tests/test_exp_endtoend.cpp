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
#include "lab/train_hooks.h"
#include "profile/roofline.h"
#include "report/report.h"
#include "report/runs.h"
#include "test_exp_util.h"
#include "train/trainer.h"

using namespace clm;
namespace fs = std::filesystem;

TEST(ExpEndToEnd, TrainTwiceProfileReportCompare) {
  fs::path d = fs::temp_directory_path() / ("clocklm_test_exp_e2e_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  // A cached roofline in a private cache folder, so --profile does not spend ~10 s measuring.
  exp_test::use_fake_roofline_cache(d / "cache");
  std::string data = exp_test::make_tiny_dataset(d);

  std::vector<std::string> tiny = exp_test::tiny_model_sets();
  tiny.push_back("train.max_steps=6");
  auto run = [&](const std::string& name, std::vector<std::string> extra, bool profile) {
    TrainOptions o;
    o.config = "d4";
    o.sets = tiny;
    o.sets.insert(o.sets.end(), extra.begin(), extra.end());
    o.data_dir = data;
    o.out_dir = (d / "runs" / name).string();
    o.budget_seconds = 60;
    o.profile = profile;
    o.quiet = true;
    o.argv = {"clocklm", "train", "--out", o.out_dir};
    o.hooks = standard_train_hooks();
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

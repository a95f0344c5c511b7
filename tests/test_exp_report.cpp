// Tests for run reading, reports, comparisons and leaderboards on the checked-in sample runs in
// tests/data/runs (issue 5): numbers read right, plots exist and are non-empty, bad input is a
// clear error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/common.h"
#include "test_cli_util.h"
#include "report/plot.h"
#include "report/report.h"
#include "report/runs.h"

using namespace clm;
namespace fs = std::filesystem;

static const std::string kSamples = std::string(CLOCKLM_SOURCE_DIR) + "/tests/data/runs";

// A scratch copy of the sample runs (reports write into the run folder).
static std::string scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("clocklm_test_exp_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  fs::copy(kSamples, d, fs::copy_options::recursive);
  return d.string();
}

static std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

static bool nonempty_file(const std::string& p, const std::string& magic) {
  if (!fs::exists(p) || fs::file_size(p) < 200) return false;
  std::string head = read_file(p).substr(0, 64);
  return head.find(magic) != std::string::npos;
}

TEST(ExpRuns, ReadsTheSampleRuns) {
  RunData m = load_run(kSamples + "/d4-muon");
  EXPECT_TRUE(m.finished());
  EXPECT_EQ(m.config_name(), "d4");
  EXPECT_DOUBLE_EQ(m.val_bpb(), 1.6704);
  EXPECT_DOUBLE_EQ(m.core(), 0.0412);
  EXPECT_DOUBLE_EQ(m.steps(), 70);
  EXPECT_EQ(m.metrics.size(), 70u);
  EXPECT_EQ(m.series("device_seconds", "val_bpb").size(), 4u);
  RunData u = load_run(kSamples + "/d6-unfinished");
  EXPECT_FALSE(u.finished());
  EXPECT_DOUBLE_EQ(u.steps(), 40);                      // from the last metrics row
  EXPECT_DOUBLE_EQ(u.val_bpb(), u.series("step", "val_bpb").back().second);
  EXPECT_TRUE(std::isnan(u.core()));
  auto found = find_runs(kSamples);
  EXPECT_EQ(found.size(), 3u);
}

TEST(ExpRuns, MalformedOrMissingMetricsAreClearErrors) {
  fs::path d = fs::temp_directory_path() / ("clocklm_test_exp_bad_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d / "empty");
  EXPECT_NE(error_of([&] { load_run((d / "nope").string()); }).find("does not exist"), std::string::npos);
  std::string e = error_of([&] { load_run((d / "empty").string()); });
  EXPECT_NE(e.find("metrics.jsonl is missing"), std::string::npos) << e;
  fs::create_directories(d / "bad");
  atomic_write((d / "bad/metrics.jsonl").string(), "{\"step\": 1, \"loss\": 3}\n{\"step\": 2, \"loss\": \n{\"step\": 3}\n");
  e = error_of([&] { load_run((d / "bad").string()); });
  EXPECT_NE(e.find("metrics.jsonl line 2"), std::string::npos) << e;
  atomic_write((d / "bad/metrics.jsonl").string(), "{\"loss\": 3}\n");
  e = error_of([&] { load_run((d / "bad").string()); });
  EXPECT_NE(e.find("\"step\""), std::string::npos) << e;
  atomic_write((d / "bad/metrics.jsonl").string(), "{\"step\": 1}\n");
  atomic_write((d / "bad/summary.json").string(), "{not json");
  e = error_of([&] { load_run((d / "bad").string()); });
  EXPECT_NE(e.find("summary.json: malformed JSON"), std::string::npos) << e;
  // A torn final line (the trainer was killed mid-write) is skipped with a warning.
  fs::remove(d / "bad/summary.json");
  atomic_write((d / "bad/metrics.jsonl").string(), "{\"step\": 1}\n{\"step\": 2, \"lo");
  RunData r = load_run((d / "bad").string());
  EXPECT_EQ(r.metrics.size(), 1u);
  EXPECT_EQ(r.warnings.size(), 1u);
  fs::remove_all(d);
}

TEST(ExpReport, ReportHasMarkdownAndNonEmptyPlots) {
  std::string dir = scratch("report");
  RunData r = load_run(dir + "/d4-muon");
  ReportFiles f = write_report(r);
  std::string md = read_file(f.markdown);
  EXPECT_NE(md.find("| val bpb | 1.6704 |"), std::string::npos) << md;
  EXPECT_NE(md.find("![training loss vs device time](train_loss_time.svg)"), std::string::npos);
  for (const char* stem : {"train_loss_time", "train_loss_tokens", "val_bpb_time", "val_bpb_tokens", "throughput"}) {
    EXPECT_TRUE(nonempty_file(dir + "/d4-muon/" + stem + ".svg", "<svg")) << stem;
    if (gnuplot_available()) EXPECT_TRUE(nonempty_file(dir + "/d4-muon/" + stem + ".png", "PNG")) << stem;
  }
  EXPECT_EQ(f.plots.size(), gnuplot_available() ? 10u : 5u);
  fs::remove_all(dir);
}

TEST(ExpReport, WithoutGnuplotStillWritesSvg) {
  std::string dir = scratch("nognuplot");
  ::setenv("CLOCKLM_GNUPLOT", "none", 1);
  ReportFiles f = write_report(load_run(dir + "/d4-adamw"));
  ::unsetenv("CLOCKLM_GNUPLOT");
  ASSERT_FALSE(f.notes.empty());
  EXPECT_NE(f.notes[0].find("gnuplot"), std::string::npos);
  std::string svg = read_file(dir + "/d4-adamw/train_loss_time.svg");
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("device time (s)"), std::string::npos);  // axis label
  EXPECT_NE(svg.find("every logged step"), std::string::npos); // legend
  EXPECT_FALSE(fs::exists(dir + "/d4-adamw/train_loss_time.png"));
  fs::remove_all(dir);
}

TEST(ExpReport, CompareHighlightsDifferences) {
  std::string dir = scratch("compare");
  std::vector<RunData> runs{load_run(dir + "/d4-muon"), load_run(dir + "/d4-adamw")};
  ReportFiles f = write_compare(runs, dir + "/cmp");
  std::string md = read_file(f.markdown);
  EXPECT_NE(md.find("| **optim.matrix.kind** | muon | **adamw** |"), std::string::npos) << md;
  EXPECT_NE(md.find("| **optim.matrix.lr** |"), std::string::npos);
  EXPECT_EQ(md.find("**model.n_layer**"), std::string::npos);  // identical keys are not highlighted
  EXPECT_NE(md.find("| val bpb | **1.6704** | 1.7855 |"), std::string::npos) << md;
  EXPECT_TRUE(nonempty_file(dir + "/cmp/val_bpb_time.svg", "<svg"));
  EXPECT_THROW(write_compare({runs[0]}, dir + "/cmp1"), Error);
  fs::remove_all(dir);
}

TEST(ExpReport, LeaderboardRanksByValBpb) {
  std::vector<std::string> errors;
  auto runs = load_runs(kSamples, &errors);
  EXPECT_TRUE(errors.empty());
  auto order = ranked(runs);
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order[0]->name, "d4-muon");
  EXPECT_EQ(order[1]->name, "d6-unfinished");
  EXPECT_EQ(order[2]->name, "d4-adamw");
  std::string t = text_table(leaderboard_table(runs));
  EXPECT_NE(t.find("0.0412"), std::string::npos);  // CORE where present
}

TEST(ExpPlot, SmoothingKeepsEndsAndAverages) {
  std::vector<double> y{1, 2, 3, 10, 5};
  auto s = smooth_centered(y, 1);
  EXPECT_DOUBLE_EQ(s[0], 1);
  EXPECT_DOUBLE_EQ(s[1], 2);
  EXPECT_DOUBLE_EQ(s[2], 5);
  EXPECT_DOUBLE_EQ(s[4], 5);
  auto e = ema({4, 4, 4}, 0.1);
  EXPECT_DOUBLE_EQ(e[0], 4);  // bias-corrected: a constant stays constant
  EXPECT_NEAR(e[2], 4, 1e-12);
}

TEST(ExpReport, CliErrorsAreOneLine) {
  std::string out;
  EXPECT_EQ(cli_test::run_clocklm("report /nonexistent/run", &out), 1);
  EXPECT_EQ(out, "clocklm: error: run directory /nonexistent/run does not exist\n");
  out.clear();
  EXPECT_EQ(cli_test::run_clocklm("leaderboard " + kSamples, &out), 0);
  EXPECT_NE(out.find("d4-muon"), std::string::npos);
}

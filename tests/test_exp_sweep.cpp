// Tests for sweeps: spec parsing and validation, grid expansion and run names, the train command
// lines, and the runner (with a stand-in trainer script, so the test needs no model or data):
// every run executed, failures reported, finished runs skipped on re-run, comparison and
// leaderboard written (issue 5).
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include "core/common.h"
#include "test_cli_util.h"
#include "lab/sweep.h"

using namespace clm;
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

static std::string error_of(const json& j) {
  try {
    parse_sweep_spec(j, "", "t");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ExpSweep, GridAndListExpand) {
  json j = json::parse(R"({
    "config": "d4", "data": "data/tiny", "budget": "90s", "set": ["train.seed=7"],
    "runs": [{"name": "adamw", "set": ["optim.matrix.kind=adamw"]}, ["model.n_layer=6"]],
    "grid": {"optim.matrix.lr": [0.01, 0.02], "model.qk_norm": [true, false]}
  })");
  SweepSpec s = parse_sweep_spec(j, "/specs", "mysweep");
  EXPECT_EQ(s.name, "mysweep");
  EXPECT_EQ(s.data, "/specs/data/tiny");  // relative to the spec's folder
  EXPECT_EQ(s.config, "d4");              // a preset name is not a path
  ASSERT_EQ(s.runs.size(), 6u);
  EXPECT_EQ(s.runs[0].name, "adamw");
  EXPECT_EQ(s.runs[1].name, "n_layer6");
  EXPECT_EQ(s.runs[2].name, "lr0.01-qk_normtrue");
  EXPECT_EQ(s.runs[3].name, "lr0.01-qk_normfalse");
  EXPECT_EQ(s.runs[5].name, "lr0.02-qk_normfalse");
  EXPECT_EQ(s.runs[5].sets, (std::vector<std::string>{"optim.matrix.lr=0.02", "model.qk_norm=false"}));
  auto args = sweep_train_args(s, s.runs[2], "OUT/x", false);
  std::vector<std::string> want = {"train", "--config", "d4", "--set", "train.seed=7", "--set", "optim.matrix.lr=0.01",
                                   "--set", "model.qk_norm=true", "--out", "OUT/x", "--data", "/specs/data/tiny",
                                   "--budget", "90s"};
  EXPECT_EQ(args, want);
  auto res = sweep_train_args(s, s.runs[2], "OUT/x", true);
  EXPECT_EQ(res[1], "--resume");
  EXPECT_EQ(sweep_run_name({"optim.matrix.lr=0.02", "optim.embed.lr=0.3"}), "optim.matrix.lr0.02-optim.embed.lr0.3");
  EXPECT_EQ(sweep_run_name({}), "base");
}

TEST(ExpSweep, BadSpecsAreClearErrors) {
  json ok = {{"config", "d4"}, {"data", "d"}, {"budget", "1m"}};
  EXPECT_EQ(error_of(ok), "(no error)");
  json j = ok;
  j["bugdet"] = "1m";
  EXPECT_NE(error_of(j).find("unknown key 'bugdet'"), std::string::npos);
  j = ok;
  j.erase("data");
  EXPECT_NE(error_of(j).find("missing \"data\""), std::string::npos);
  j = ok;
  j["budget"] = "ten minutes";
  EXPECT_NE(error_of(j).find("malformed duration"), std::string::npos);
  j = ok;
  j["grid"] = {{"optim.matrix.lr", json::array()}};
  EXPECT_NE(error_of(j).find("non-empty list"), std::string::npos);
  j = ok;
  j["runs"] = {{{"name", "a"}}, {{"name", "a"}}};
  EXPECT_NE(error_of(j).find("two runs are named 'a'"), std::string::npos);
  j = ok;
  j["runs"] = {{"lr0.1"}};
  EXPECT_NE(error_of(j).find("not key=value"), std::string::npos);
  j = ok;
  j["runs"] = {{{"name", "../escape"}}};
  EXPECT_NE(error_of(j).find("plain folder name"), std::string::npos);
}

// A stand-in for `clocklm train`: writes a tiny run whose val bpb is the matrix lr, and fails when
// asked to train with lr=bad.
static const char* kFakeTrain = R"(#!/bin/sh
out=""; lr="1"; resume=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift ;;
    --resume) out="$2"; resume=1; shift ;;
    --set) case "$2" in optim.matrix.lr=*) lr="${2#optim.matrix.lr=}" ;; esac; shift ;;
  esac
  shift
done
[ "$lr" = "bad" ] && { echo "clocklm: error: invalid lr" >&2; exit 1; }
mkdir -p "$out"
echo "{\"name\": \"d4\", \"optim\": {\"matrix\": {\"lr\": \"$lr\"}}}" > "$out/config.json"
echo "{\"step\": 1, \"tokens\": 100, \"device_seconds\": 1, \"loss\": 5}" > "$out/metrics.jsonl"
echo "{\"step\": 2, \"tokens\": 200, \"device_seconds\": 2, \"loss\": 4, \"val_bpb\": $lr}" >> "$out/metrics.jsonl"
echo "{\"val_bpb\": $lr, \"steps\": 2, \"tokens\": 200, \"device_seconds\": 2, \"config\": \"d4\"}" > "$out/summary.json"
echo "ran" >> "$out/../calls.txt"
)";

TEST(ExpSweep, RunsEveryVariantThenComparesAndRanks) {
  fs::path d = fs::temp_directory_path() / ("clocklm_test_exp_sweep_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  std::string fake = (d / "fake-train.sh").string();
  atomic_write(fake, kFakeTrain);
  ::chmod(fake.c_str(), 0755);
  json j = {{"config", "d4"}, {"data", "data"}, {"budget", "1m"},
            {"grid", {{"optim.matrix.lr", json::array({0.3, 0.1, "bad", 0.2})}}}};
  SweepSpec s = parse_sweep_spec(j, "", "lr");
  SweepOptions o;
  o.out_dir = (d / "out").string();
  o.exe = fake;
  ::setenv("CLOCKLM_GNUPLOT", "none", 1);  // plots are tested in test_exp_report; keep this fast
  std::FILE* log = std::tmpfile();
  EXPECT_EQ(run_sweep(s, o, log), 1);  // the "bad" run failed, the others ran
  std::fclose(log);
  json rec = json::parse(read_file(o.out_dir + "/sweep.json"));
  ASSERT_EQ(rec["runs"].size(), 4u);
  EXPECT_EQ(rec["runs"][2]["status"], "failed");
  EXPECT_EQ(rec["runs"][3]["status"], "done");
  EXPECT_EQ(rec["failed"], 1);
  std::string lb = read_file(o.out_dir + "/leaderboard.md");
  size_t a = lb.find("lr0.1"), b = lb.find("lr0.2"), c = lb.find("lr0.3");
  ASSERT_NE(a, std::string::npos);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);  // ranked by val bpb
  std::string cmp = read_file(o.out_dir + "/compare/compare.md");
  EXPECT_NE(cmp.find("**optim.matrix.lr**"), std::string::npos);
  EXPECT_EQ(read_file(o.out_dir + "/calls.txt"), "ran\nran\nran\n");
  // Again: finished runs are skipped; only the failed one is retried (and fails again).
  log = std::tmpfile();
  EXPECT_EQ(run_sweep(s, o, log), 1);
  std::fclose(log);
  EXPECT_EQ(read_file(o.out_dir + "/calls.txt"), "ran\nran\nran\n");
  ::unsetenv("CLOCKLM_GNUPLOT");
  fs::remove_all(d);
}

TEST(ExpSweep, CliDryRunAndSpecErrors) {
  fs::path d = fs::temp_directory_path() / ("clocklm_test_exp_sweepcli_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  atomic_write((d / "lr.json").string(), R"({
    // comments are allowed
    "config": "d4", "data": "data", "budget": "30s",
    "grid": {"optim.matrix.lr": [0.01, 0.02]}
  })");
  std::string out;
  ASSERT_EQ(cli_test::run_clocklm("sweep " + (d / "lr.json").string() + " --dry-run --out " + (d / "out").string(), &out), 0) << out;
  EXPECT_NE(out.find("train --config d4 --set optim.matrix.lr=0.01 --out " + (d / "out/lr0.01").string() +
                     " --data " + (d / "data").string() + " --budget 30s"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("run 2/2 lr0.02"), std::string::npos);
  EXPECT_FALSE(fs::exists(d / "out"));  // a dry run writes nothing
  atomic_write((d / "bad.json").string(), R"({"config": "d4", "data": "x", "budget": "1m", "grid": []})");
  out.clear();
  EXPECT_EQ(cli_test::run_clocklm("sweep " + (d / "bad.json").string(), &out), 1);
  EXPECT_NE(out.find("clocklm: error: " + (d / "bad.json").string() + ": sweep spec: \"grid\" must be an object"),
            std::string::npos)
      << out;
  fs::remove_all(d);
}

// Names become folders: the sweep name and grid-made run names can never be "." or "..", and a
// grid whose size would wrap around is refused.
TEST(ExpSweep, NamesStayInsideTheSweepFolder) {
  json ok = {{"config", "d4"}, {"data", "d"}, {"budget", "1m"}};
  json j = ok;
  j["name"] = "../up";
  EXPECT_NE(error_of(j).find("plain folder name"), std::string::npos);
  j = ok;
  j["grid"] = {{"", {"x"}}};
  EXPECT_NE(error_of(j).find("not a config key"), std::string::npos);
  j = ok;
  j["grid"] = {{".", {"."}}};
  SweepSpec s = parse_sweep_spec(j, "", "s");
  ASSERT_EQ(s.runs.size(), 1u);
  EXPECT_NE(s.runs[0].name[0], '.');
  j = ok;
  j["grid"] = json::object();
  for (int a = 0; a < 70; ++a) j["grid"][fmt::format("k{}", a)] = {1, 2};
  EXPECT_NE(error_of(j).find("more than 1000 points"), std::string::npos);
  EXPECT_EQ(parse_sweep_spec_text(R"({"config": "d4", "data": "d", "budget": "1m"})", "/x/my spec.json").name,
            "my_spec");
}

// Checkpoints written by an earlier build stay usable: tests/data/ckpt-v1 (see its README) holds a
// small trained run and its dataset; today's binary must evaluate its checkpoint to the bpb that the
// writing build recorded and resume it to the losses that build logged.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/common.h"
#include "test_cli_util.h"

using cli_test::run_clocklm;
namespace fs = std::filesystem;

namespace {

const std::string kFixture = std::string(CLOCKLM_SOURCE_DIR) + "/tests/data/ckpt-v1";

// A scratch copy of the fixture (a resumed run writes into its folder).
fs::path scratch_copy(const std::string& tag) {
  fs::path dir = fs::temp_directory_path() / ("clocklm_ckpt_compat_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(kFixture, dir, fs::copy_options::recursive);
  return dir;
}

}  // namespace

TEST(CheckpointCompat, OldCheckpointEvaluatesToItsRecordedBpb) {
  fs::path dir = scratch_copy("eval");
  std::string js = (dir / "bpb.json").string(), out;
  ASSERT_EQ(run_clocklm("eval bpb --data " + (dir / "ds").string() + " --checkpoint " +
                            (dir / "run/checkpoints/step_00000030.ckpt").string() +
                            " --val-tokens 4096 --json " + js, &out), 0) << out;
  auto j = nlohmann::json::parse(clm::read_file(js));
  auto summary = nlohmann::json::parse(clm::read_file(kFixture + "/run/summary.json"));
  EXPECT_EQ(j["tokens"], 4094);
  EXPECT_EQ(j["bytes"], 5744);
  // The writing build measured 4.399566533232281 with fp32 matmuls on an AVX-512 CPU; another
  // instruction set sums in another order, hence the tolerance.
  EXPECT_NEAR(j["bpb"].get<double>(), summary["val"]["bpb"].get<double>(), 1e-4);
  fs::remove_all(dir);
}

TEST(CheckpointCompat, OldRunResumesToTheLossesItsBuildLogged) {
  fs::path dir = scratch_copy("resume");
  std::string out;
  ASSERT_EQ(run_clocklm("train --resume " + (dir / "run").string() + " --data " + (dir / "ds").string() +
                            " --set train.max_steps=33 --quiet", &out), 0) << out;
  // Losses of steps 31..33 as the writing build logged them when resumed the same way.
  const std::vector<double> loss = {4.037059783935547, 4.103750705718994, 4.116518020629883};
  const std::vector<double> mtp = {4.497283935546875, 4.527349472045898, 4.491387367248535};
  std::vector<nlohmann::json> rows;
  std::istringstream lines(clm::read_file((dir / "run/metrics.jsonl").string()));
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    auto r = nlohmann::json::parse(line);
    if (r.contains("loss") && r["step"].get<int>() > 30) rows.push_back(r);
  }
  ASSERT_EQ(rows.size(), 3u) << out;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rows[i]["step"], int(31 + i));
    EXPECT_NEAR(rows[i]["loss"].get<double>(), loss[i], 2e-3) << "step " << 31 + i;
    EXPECT_NEAR(rows[i]["mtp_loss"].get<double>(), mtp[i], 2e-3) << "step " << 31 + i;
  }
  fs::remove_all(dir);
}

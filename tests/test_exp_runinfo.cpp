// Tests for run records and the roofline's JSON round trip (issue 5).
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/common.h"
#include "profile/runinfo.h"
#include "profile/roofline.h"

using namespace clm;

TEST(ExpRunInfo, GitCommitIsHashOrUnknown) {
  std::string c = git_commit();
  if (c != "unknown") {
    ASSERT_EQ(c.size(), 40u);
    for (char ch : c) EXPECT_TRUE(std::isxdigit(static_cast<unsigned char>(ch))) << c;
  }
}

TEST(ExpRunInfo, MachineInfoHasTheFacts) {
  auto m = machine_info();
  EXPECT_TRUE(m["cpu_model"].is_string());
  EXPECT_FALSE(m["cpu_model"].get<std::string>().empty());
  EXPECT_GE(m["cores"].get<int>(), 1);
  EXPECT_GE(m["logical_cpus"].get<int>(), m["cores"].get<int>());
  EXPECT_GE(m["threads"].get<int>(), 1);
  EXPECT_GT(m["memory_gb"].get<double>(), 0.0);
  EXPECT_TRUE(m["gpus"].is_array());
  EXPECT_FALSE(m["hostname"].get<std::string>().empty());
}

TEST(ExpRunInfo, RunRecordQuotesTheCommandLine) {
  auto r = run_record({"clocklm", "train", "--set", "lr=0.1 x", "--out", "RUN"});
  EXPECT_EQ(r["command"], "clocklm train --set 'lr=0.1 x' --out RUN");
  EXPECT_EQ(r["argv"].size(), 6u);
  EXPECT_EQ(r["version"], CLOCKLM_VERSION);
  EXPECT_TRUE(r["git_commit"].is_string());
  EXPECT_TRUE(r["git_dirty"].is_boolean());
  EXPECT_TRUE(r["machine"].is_object());
  std::string t = r["start_time"];
  ASSERT_EQ(t.size(), 20u);  // 2026-11-30T09:15:03Z
  EXPECT_EQ(t[10], 'T');
  EXPECT_EQ(t.back(), 'Z');
}

TEST(ExpRoofline, JsonRoundTripAndRidge) {
  Roofline r;
  r.cpu_model = "test cpu";
  r.threads = 2;
  r.fp32_flops = 200e9;
  r.bf16_flops = 400e9;
  r.copy_bytes_per_s = 30e9;
  r.triad_bytes_per_s = 40e9;
  EXPECT_DOUBLE_EQ(r.peak_flops(), 400e9);
  EXPECT_DOUBLE_EQ(r.mem_bytes_per_s(), 40e9);
  EXPECT_DOUBLE_EQ(r.ridge(true), 10.0);
  EXPECT_DOUBLE_EQ(r.ridge(false), 5.0);
  Roofline q = roofline_from_json(to_json(r));
  EXPECT_EQ(q.cpu_model, "test cpu");
  EXPECT_DOUBLE_EQ(q.bf16_flops, 400e9);
  EXPECT_DOUBLE_EQ(q.triad_bytes_per_s, 40e9);
  EXPECT_THROW(roofline_from_json(nlohmann::json::object()), Error);
}

TEST(ExpRoofline, CachePathNamesTheMachine) {
  std::string p = roofline_cache_path(2);
  if (p.empty()) GTEST_SKIP() << "no HOME";
  EXPECT_NE(p.find("clocklm/roofline-"), std::string::npos);
  EXPECT_NE(p, roofline_cache_path(1));  // thread count is part of the key
}

TEST(ExpRoofline, QuickMeasurementIsSane) {
  // A short measurement (the backend's matmul peaks, small bandwidth arrays): checks the
  // machinery, not the speed.
  Roofline r = measure_roofline(0.001, 0, nullptr, size_t(1) << 20);
  EXPECT_GT(r.fp32_flops, 1e8);
  EXPECT_GE(r.bf16_flops, 0.0);
  EXPECT_GT(r.copy_bytes_per_s, 1e8);
  EXPECT_GT(r.triad_bytes_per_s, 1e8);
  EXPECT_GT(r.ridge(true), 0.0);
  EXPECT_EQ(r.matmul_size, kPeakGemmSide);
  EXPECT_EQ(r.fp32_flops, cpu_backend().peak_flops(MatPrec::F32));  // measured once per process
  EXPECT_FALSE(r.measured_at.empty());
}

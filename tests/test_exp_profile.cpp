// Tests for the profiler's analysis: FLOP/byte formulas against hand counts, self time of nested
// scopes, the gap row, roofline classification, and the Chrome trace format (issue 5).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/common.h"
#include "profile/profile_report.h"

using namespace clm;

static Roofline test_roof() {
  Roofline r;
  r.cpu_model = "test";
  r.threads = 1;
  r.fp32_flops = 100e9;
  r.bf16_flops = 200e9;
  r.copy_bytes_per_s = 20e9;
  r.triad_bytes_per_s = 20e9;  // ridge: 10 FLOP/byte (bf16), 5 (fp32)
  return r;
}

TEST(ExpProfile, MatmulCostEqualsHandCount) {
  // 2x3 @ 3x4: each of the 8 outputs is 3 multiplies + 3 adds = 48 FLOPs.
  OpCost c = matmul_cost(2, 4, 3);
  EXPECT_DOUBLE_EQ(c.flops, 48);
  EXPECT_DOUBLE_EQ(c.bytes, (6 + 12 + 8) * 4);
  // bf16 inputs, fp32 output accumulated (read + write).
  OpCost a = matmul_cost(2, 4, 3, 2, 2, 4, true);
  EXPECT_DOUBLE_EQ(a.flops, 48);
  EXPECT_DOUBLE_EQ(a.bytes, 6 * 2 + 12 * 2 + 8 * 4 * 2);
}

TEST(ExpProfile, ElementwiseAndAttentionCostEqualHandCount) {
  // y = x + r over 10 fp32 elements: 10 adds, reads 2x40 bytes, writes 40.
  OpCost e = elementwise_cost(10, 2, 1, 1.0);
  EXPECT_DOUBLE_EQ(e.flops, 10);
  EXPECT_DOUBLE_EQ(e.bytes, 120);
  // T=3, D=2, one head: visible pairs 1+2+3 = 6; per pair q.k (2D) and p*v (2D) = 8 FLOPs -> 48.
  OpCost a = attention_fwd_cost(1, 1, 3, 2);
  EXPECT_DOUBLE_EQ(a.flops, 48);
  EXPECT_DOUBLE_EQ(a.bytes, 4 * 3 * 2 * 4);
  EXPECT_DOUBLE_EQ(attention_fwd_cost(2, 3, 3, 2).flops, 6 * 48);
}

// Builds a synthetic profile: one step of 10 ms with a 4 ms matmul, a 2 ms "block" enclosing a
// 1.5 ms add, and 3 ms of optimizer; 10 - 4 - 2 - 3 = 1 ms gap.
static Profiler synthetic() {
  Profiler p;
  p.origin = 100.0;
  double t = 100.0;
  auto ms = [](double x) { return x * 1e-3; };
  OpCost mm = matmul_cost(512, 512, 512);         // 268 MFLOP, 3 MB: intensity 85 -> compute
  OpCost add = elementwise_cost(1 << 20, 2, 1, 1); // 1 MFLOP, 12 MB: intensity 0.08 -> memory
  p.events.push_back({"matmul.qkv", "fwd", t + ms(0.5), t + ms(4.5), mm.flops, mm.bytes});
  // ProfScope records a child before its parent (destructor order): keep that order here.
  p.events.push_back({"add", "fwd", t + ms(4.6), t + ms(6.1), add.flops, add.bytes});
  p.events.push_back({"block", "fwd", t + ms(4.5), t + ms(6.5), 0, 0});
  p.events.push_back({"adamw", "optim", t + ms(6.5), t + ms(9.5), 0, 48e6});
  p.mark_step(t, t + ms(10));
  return p;
}

TEST(ExpProfile, AnalysisSelfTimeGapAndBounds) {
  Profiler p = synthetic();
  ProfileSummary s = analyze_profile(p, 0, 1, test_roof());
  EXPECT_EQ(s.steps, 1);
  EXPECT_NEAR(s.measured_seconds, 10e-3, 1e-12);
  EXPECT_NEAR(s.op_seconds, 9e-3, 1e-9);
  EXPECT_NEAR(s.gap_seconds, 1e-3, 1e-9);
  double sum = 0;
  for (auto& o : s.ops) sum += o.seconds;
  EXPECT_NEAR(sum, s.measured_seconds, 1e-9);  // ops (self times) + gap = measured step time
  auto find = [&](const std::string& n) {
    for (auto& o : s.ops)
      if (o.name == n) return o;
    ADD_FAILURE() << "no op " << n;
    return OpStats{};
  };
  OpStats mm = find("matmul.qkv"), add = find("add"), block = find("block"), adam = find("adamw");
  EXPECT_EQ(s.ops.front().name, "matmul.qkv");  // sorted by time
  EXPECT_EQ(s.ops.back().name, "(gap)");
  EXPECT_NEAR(block.seconds, 0.5e-3, 1e-9);     // 2 ms minus its 1.5 ms child
  EXPECT_NEAR(add.seconds, 1.5e-3, 1e-9);
  EXPECT_EQ(mm.bound, "compute");
  EXPECT_EQ(add.bound, "memory");
  EXPECT_EQ(adam.bound, "memory");
  EXPECT_EQ(block.bound, "");
  EXPECT_NEAR(mm.share, 0.4, 1e-6);
  EXPECT_NEAR(mm.flops_per_s, 2.0 * 512 * 512 * 512 / 4e-3, 1);
  EXPECT_NEAR(mm.intensity, mm.flops / mm.bytes, 1e-12);
  // Roofline time of the matmul: flops / 200 GFLOP/s; fraction = that / 4 ms.
  EXPECT_NEAR(mm.roof_fraction, (2.0 * 512 * 512 * 512 / 200e9) / 4e-3, 1e-9);
  EXPECT_NEAR(adam.roof_fraction, (48e6 / 20e9) / 3e-3, 1e-9);
  // fp32 roof halves the compute ceiling.
  ProfileSummary f = analyze_profile(p, 0, 1, test_roof(), false);
  EXPECT_NEAR(f.peak_flops(), 100e9, 1);
  // Phase totals.
  ASSERT_GE(s.phases.size(), 2u);
  EXPECT_EQ(s.phases[0].name, "fwd");
  EXPECT_NEAR(s.phases[0].seconds, 6e-3, 1e-9);
  EXPECT_NEAR(s.phases[1].seconds, 3e-3, 1e-9);
  std::string table = format_profile_table(s);
  EXPECT_NE(table.find("matmul.qkv"), std::string::npos);
  EXPECT_NE(table.find("(gap)"), std::string::npos);
}

TEST(ExpProfile, ChromeTraceIsValid) {
  Profiler p = synthetic();
  auto dir = std::filesystem::temp_directory_path() / ("clocklm_test_exp_profile_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  Roofline r = test_roof();
  write_profile(p, dir.string(), 0, 1, &r);
  auto trace = nlohmann::json::parse(read_file((dir / "trace.json").string()));
  ASSERT_TRUE(trace["traceEvents"].is_array());
  int complete = 0;
  for (auto& e : trace["traceEvents"]) {
    ASSERT_TRUE(e["name"].is_string());
    ASSERT_TRUE(e["ph"].is_string());
    ASSERT_TRUE(e["pid"].is_number_integer());
    ASSERT_TRUE(e["tid"].is_number_integer());
    if (e["ph"] == "X") {
      complete++;
      ASSERT_TRUE(e["ts"].is_number());
      ASSERT_TRUE(e["dur"].is_number());
      EXPECT_GE(e["ts"].get<double>(), 0);
      EXPECT_GE(e["dur"].get<double>(), 0);
    }
  }
  EXPECT_EQ(complete, 5);  // 4 ops + 1 step
  auto prof = nlohmann::json::parse(read_file((dir / "profile.json").string()));
  EXPECT_EQ(prof["steps"], 1);
  EXPECT_EQ(prof["ops"][0]["name"], "matmul.qkv");
  EXPECT_NEAR(prof["ops"][0]["ms_per_step"].get<double>(), 4.0, 1e-6);
  EXPECT_TRUE(std::filesystem::file_size(dir / "profile.txt") > 0);
  std::filesystem::remove_all(dir);
}

TEST(ExpProfile, ScopeWithoutProfilerRecordsNothing) {
  { ProfScope s(nullptr, "x", "fwd", 1, 1); }
  Profiler p;
  p.clear();
  { ProfScope s(&p, "x", "fwd", 7, 9); }
  ASSERT_EQ(p.events.size(), 1u);
  EXPECT_EQ(p.events[0].flops, 7);
  EXPECT_GE(p.events[0].end, p.events[0].start);
}

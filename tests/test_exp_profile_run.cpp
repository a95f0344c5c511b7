// Profiles real training steps of a tiny GPT (issue 5): op self times plus the gap add up to the
// measured step time, instrumentation covers most of the step, and the model's FLOP counts for
// matmuls equal hand counts for these shapes.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/common.h"
#include "profile/profile_report.h"
#include "profile/profile_run.h"

using namespace clm;

static Roofline fake_roof() {
  Roofline r;
  r.cpu_model = "test";
  r.threads = 1;
  r.fp32_flops = 100e9;
  r.bf16_flops = 200e9;
  r.copy_bytes_per_s = r.triad_bytes_per_s = 20e9;
  return r;
}

TEST(ExpProfileRun, TinyModelOpsAddUpToTheStep) {
  ProfileRunOptions o;
  o.config = "d4";
  o.sets = {"model.n_layer=2", "model.d_model=64", "model.n_head=2", "model.n_kv_head=2", "model.head_dim=32",
            "model.vocab_size=256"};
  o.steps = 2;
  o.warmup = 1;
  o.batch = 2;
  o.seq = 16;
  ProfileRunResult r = profile_training_steps(o);
  ASSERT_EQ(r.prof.steps.size(), 2u);
  ASSERT_FALSE(r.prof.events.empty());
  ProfileSummary s = analyze_profile(r.prof, r.measured_seconds, o.steps, fake_roof());
  // Self times + gap reproduce the measured time exactly (to rounding): nothing is double-counted.
  double sum = 0;
  for (const auto& op : s.ops) sum += op.seconds;
  EXPECT_NEAR(sum, r.measured_seconds, 1e-6 * r.measured_seconds + 1e-9);
  // Stated tolerance: the scopes cover at least 75% of the step (the gap is loop overhead and the
  // few un-instrumented lines between ops; scheduling noise on a shared machine is the margin).
  EXPECT_GE(s.op_seconds, 0.75 * r.measured_seconds) << format_profile_table(s);
  EXPECT_LE(s.op_seconds, r.measured_seconds * (1 + 1e-9));
  // Hand counts: N = B*T = 32 tokens, d = 64, q/k/v widths 2*32 each -> qkv width 192.
  // matmul.qkv forward: 2 * N * d * 192 FLOPs per layer; 2 layers; 2 steps.
  const double N = 32, d = 64, qkvw = 192, Vp = 256;
  bool saw_qkv = false, saw_head = false, saw_optim = false;
  for (const auto& op : s.ops) {
    if (op.name == "matmul.qkv" && op.phase == "fwd") {
      saw_qkv = true;
      EXPECT_DOUBLE_EQ(op.flops, 2.0 * N * d * qkvw * 2 * 2);
      EXPECT_EQ(op.count, 4);
    }
    if (op.name == "matmul.head" && op.phase == "fwd") {
      saw_head = true;
      EXPECT_DOUBLE_EQ(op.flops, 2.0 * N * d * Vp * 2);
    }
    if (op.phase == "optim") saw_optim = true;
    EXPECT_GE(op.flops, 0);
    EXPECT_GE(op.bytes, 0);
  }
  EXPECT_TRUE(saw_qkv);
  EXPECT_TRUE(saw_head);
  EXPECT_TRUE(saw_optim);
  // The trace of real steps is valid Chrome trace JSON with one complete event per scope and step.
  auto t = chrome_trace(r.prof);
  size_t complete = 0;
  for (auto& e : t["traceEvents"]) complete += e["ph"] == "X";
  EXPECT_EQ(complete, r.prof.events.size() + 2);
}

TEST(ExpProfileRun, BadConfigIsAClearError) {
  ProfileRunOptions o;
  o.config = "no-such-preset";
  EXPECT_THROW(profile_training_steps(o), Error);
  o.config = "d4";
  o.steps = 0;
  EXPECT_THROW(profile_training_steps(o), Error);
}

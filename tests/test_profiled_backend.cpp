// The profiling decorator (backend/profiled_backend.h): per-op cost formulas against hand counts,
// naming by the innermost ProfRegion, memory ops without events, and a profiled forward/backward
// and optimizer step of a small GPT whose matmul FLOPs add up to the model's own count.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "backend/profiled_backend.h"
#include "core/common.h"
#include "core/profiler.h"
#include "model/config.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "test_model_util.h"

using namespace clm;

namespace {

std::vector<const OpEvent*> op_events(const Profiler& p) {
  std::vector<const OpEvent*> out;
  for (const OpEvent& e : p.events)
    if (e.op) out.push_back(&e);
  return out;
}

ModelConfig small_model() {
  // vocab 37 is padded to 64
  ModelConfig c = model_test::tiny_config(
      {.d_model = 32, .head_dim = 8, .mlp_ratio = 2.0f, .vocab_size = 37, .seq_len = 16});
  c.logit_softcap = 5.0f;
  return c;
}

}  // namespace

TEST(ProfiledBackend, GemmAndRmsnormCostsEqualHandCounts) {
  Backend& cpu = cpu_backend();
  Profiler prof;
  ProfiledBackend pb(cpu, prof);
  // C[3,5] = A[3,7] B^T (B stored [5,7]): 2*3*5*7 FLOPs; fp32 A and B read once (4*(21+35)),
  // C written once (4*15).
  DeviceBuffer A(cpu, 21 * 4), B(cpu, 35 * 4), C(cpu, 15 * 4);
  pb.gemm({.prec = MatPrec::F32, .trans_b = true, .M = 3, .N = 5, .K = 7, .A = A.as<void>(), .B = B.as<void>(),
           .C = C.as<float>()});
  // bf16 inputs (2 bytes each), C read and written (8*15).
  pb.gemm({.prec = MatPrec::BF16, .trans_b = true, .M = 3, .N = 5, .K = 7, .A = A.as<void>(), .B = B.as<void>(),
           .C = C.as<float>(), .accumulate = true});
  // RMSNorm of 4 rows of 6 into bf16: 4 FLOPs per element and (8 + 2) bytes (x read and
  // counted once more for the gain and statistics, y written in bf16); backward 8 and 16.
  DeviceBuffer x(cpu, 24 * 4), y(cpu, 24 * 4), rstd(cpu, 4 * 4);
  pb.rmsnorm_fwd({.rows = 4, .C = 6, .eps = 1e-5f, .x = x.as<float>(), .y = y.as<void>(), .out_t = DType::BF16,
                  .rstd = rstd.as<float>()});
  pb.rmsnorm_bwd({.rows = 4, .C = 6, .x = x.as<float>(), .rstd = rstd.as<float>(), .dy = y.as<float>(),
                  .dx = x.as<float>()});
  ASSERT_EQ(prof.events.size(), 4u);
  EXPECT_DOUBLE_EQ(prof.events[0].flops, 210);
  EXPECT_DOUBLE_EQ(prof.events[0].bytes, 4.0 * (21 + 35) + 4.0 * 15);
  EXPECT_DOUBLE_EQ(prof.events[1].flops, 210);
  EXPECT_DOUBLE_EQ(prof.events[1].bytes, 2.0 * (21 + 35) + 8.0 * 15);
  EXPECT_DOUBLE_EQ(prof.events[2].flops, 96);
  EXPECT_DOUBLE_EQ(prof.events[2].bytes, 10.0 * 24);
  EXPECT_DOUBLE_EQ(prof.events[3].flops, 8.0 * 24);
  EXPECT_DOUBLE_EQ(prof.events[3].bytes, 16.0 * 24);
  EXPECT_STREQ(prof.events[0].op, "gemm");
  EXPECT_STREQ(prof.events[2].op, "rmsnorm_fwd");
}

TEST(ProfiledBackend, AttentionCostCountsTheAttendedPairs) {
  // 3 queries over 5 keys (positions 2, 3, 4): 3 + 4 + 5 = 12 pairs; a window of 2: 2 each.
  EXPECT_DOUBLE_EQ(op_cost::attended_pairs(3, 5, 0), 12);
  EXPECT_DOUBLE_EQ(op_cost::attended_pairs(3, 5, 2), 6);
  EXPECT_DOUBLE_EQ(op_cost::attended_pairs(4, 4, 0), 10);
  EXPECT_DOUBLE_EQ(op_cost::attended_pairs(16, 16, 5), 16 * mean_attended_keys(16, 5));
  const HeadShape s{.B = 2, .H = 4, .Hkv = 2, .hd = 8};
  // 4 FLOPs per (query, key, head dim) for q.k and p.v.
  EXPECT_DOUBLE_EQ(op_cost::attention_fwd(s, 4, 4, 0).flops, 4.0 * 2 * 4 * 8 * 10);
}

TEST(ProfiledBackend, EventsTakeTheInnermostRegionAndMemoryOpsRecordNothing) {
  Backend& cpu = cpu_backend();
  Profiler prof;
  ProfiledBackend pb(cpu, prof);
  DeviceBuffer x(cpu, 64 * 4), y(cpu, 64 * 4);
  pb.scale(x.as<float>(), 2.0f, 64);  // no region: the op's own name, phase "other"
  {
    ProfRegion outer(&prof, "block", "fwd");
    ProfRegion inner(&prof, "residual", "bwd");
    pb.axpy(y.as<float>(), 1.0f, x.as<float>(), 64);
  }
  pb.copy(y.as<void>(), x.as<void>(), 64 * 4);
  pb.zero(y.as<void>(), 64 * 4);
  pb.synchronize();
  ASSERT_EQ(prof.events.size(), 2u);
  EXPECT_STREQ(prof.events[0].name, "scale");
  EXPECT_STREQ(prof.events[0].phase, "other");
  EXPECT_STREQ(prof.events[1].name, "residual");
  EXPECT_STREQ(prof.events[1].phase, "bwd");
  EXPECT_DOUBLE_EQ(prof.events[1].flops, 128);
  EXPECT_TRUE(prof.regions.empty());
}

TEST(ProfiledBackend, ModelMatmulFlopsAddUpToFlopsPerToken) {
  const ModelConfig c = small_model();
  const int B = 2, T = 16;
  GPT m(c, B, T);
  m.init_weights(5);
  Rng r(9);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (auto& t : in) t = int32_t(r.next() % 37);
  for (auto& t : tg) t = int32_t(r.next() % 37);
  m.forward(in.data(), tg.data(), B, T);  // unprofiled: the bf16 weights and tables are ready

  Profiler prof;
  m.set_profiler(&prof);
  m.zero_grad();
  {
    ProfRegion step(&prof, "step.fwd", "fwd");
    m.forward(in.data(), tg.data(), B, T);
  }
  {
    ProfRegion step(&prof, "step.bwd", "bwd");
    m.backward();
  }
  m.set_profiler(nullptr);
  const size_t recorded = prof.events.size();
  m.forward(in.data(), tg.data(), B, T);
  EXPECT_EQ(prof.events.size(), recorded) << "events after the profiler was detached";

  double gemm_flops = 0;
  std::set<std::string> ops;
  for (const OpEvent* e : op_events(prof)) {
    ops.insert(e->op);
    // Inside a region (the test's or the model's own): an op outside every region has phase "other".
    EXPECT_TRUE(std::string(e->phase) == "fwd" || std::string(e->phase) == "bwd") << e->name;
    if (std::string(e->op) == "gemm") gemm_flops += e->flops;
  }
  for (const char* op : {"gemm", "rmsnorm_fwd", "rmsnorm_bwd", "qkv_heads_fwd", "qkv_heads_bwd",
                         "attention_fwd", "attention_bwd", "activation_fwd", "activation_bwd",
                         "softcap_xent", "embedding_fwd", "embedding_bwd"})
    EXPECT_TRUE(ops.count(op)) << op;
  // flops_per_token = 3 x (matmuls + attention) of one token's forward: the matmuls are exactly
  // the rest once the attention share is taken out.
  const double tokens = double(B) * T;
  const double attention = 3.0 * c.n_layer * 4.0 * c.n_head * c.head_dim * mean_attended_keys(T, c.attn_window);
  EXPECT_NEAR(gemm_flops, (m.flops_per_token(T) - attention) * tokens, 1e-9 * gemm_flops);
  EXPECT_LT(gemm_flops, m.flops_per_token(T) * tokens);
}

TEST(ProfiledBackend, OptimizerOpsAreNamedByItsRegions) {
  GPT m(small_model(), 1, 8);
  m.init_weights(3);
  std::vector<int32_t> in(8, 1), tg(8, 2);
  m.forward(in.data(), tg.data(), 1, 8);
  m.backward();
  Optimizer opt(m.params(), OptimConfig{});
  Profiler prof;
  opt.set_profiler(&prof);
  opt.step(1.0f);
  opt.set_profiler(nullptr);
  const std::set<std::string> names = {"optim.grad_norm", "adamw.matrix", "adamw.embed", "adamw.head",
                                       "adamw.scalar", "muon.momentum", "muon.newton_schulz",
                                       "muon.normuon", "muon.apply"};
  const auto evs = op_events(prof);
  ASSERT_FALSE(evs.empty());
  bool saw_norm = false;
  for (const OpEvent* e : evs) {
    EXPECT_TRUE(names.count(e->name)) << e->name;
    EXPECT_STREQ(e->phase, "optim");
    EXPECT_GE(e->flops, 0);
    saw_norm = saw_norm || std::string(e->name) == "optim.grad_norm";
  }
  EXPECT_TRUE(saw_norm);
}

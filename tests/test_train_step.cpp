// The training step and backend selection: `auto` precision follows the device, --device names are
// checked, three whole steps at `auto` precision track the fp32 reference, steps are deterministic,
// twenty steps with the batched Newton-Schulz track one matrix at a time, and a non-finite loss or gradient throws NonFiniteError without touching the weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/matmul.h"
#include "core/common.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "train/step_window.h"
#include "train/train_step.h"
#include "test_counting_backend_util.h"
#include "test_model_util.h"

using namespace clm;

namespace {

ModelConfig small_model(const std::string& prec) {
  ModelConfig c = model_test::tiny_config();
  c.zero_init_out = false;  // every matmul carries signal from the first step
  c.matmul_precision = prec;
  return c;
}

struct Curve {
  std::vector<double> loss;
  std::vector<float> norm;
};

// Three optimizer steps of two micro-batches each on fixed tokens.
Curve three_steps(const std::string& prec) {
  const int B = 2, T = 32, accum = 2;
  ModelConfig mc = small_model(prec);
  GPT model(mc, B, T);
  model.init_weights(5);
  Optimizer opt(model.params(), model_test::muon_optim(prec));
  auto in = model_test::random_tokens(size_t(accum) * B * T, mc.vocab_size, 11),
       tg = model_test::random_tokens(in.size(), mc.vocab_size, 12);
  Curve c;
  for (int s = 0; s < 3; ++s) {
    StepResult r = train_step(model, &opt, in.data(), tg.data(), accum, B, T, ScheduleValues{1.0f, 1.0f, 0.9f});
    c.loss.push_back(r.loss);
    c.norm.push_back(r.grad_norm);
    EXPECT_GT(r.seconds, 0.0);
  }
  return c;
}

}  // namespace

TEST(TrainStep, AutoPrecisionFollowsTheDevice) {
  Backend& be = cpu_backend();
  EXPECT_EQ(resolve_precision("auto", be), be.native_bf16() ? MatPrec::BF16 : MatPrec::F32);
  EXPECT_EQ(resolve_precision("bf16", be), MatPrec::BF16);
  EXPECT_EQ(resolve_precision("fp32", be), MatPrec::F32);
  EXPECT_THROW(resolve_precision("fp16", be), Error);
  GPT model(small_model("auto"), 1, 8);
  EXPECT_EQ(model.matmul_precision(), resolve_precision("auto", be));
  GPT forced(small_model("fp32"), 1, 8);
  EXPECT_EQ(forced.matmul_precision(), MatPrec::F32);
}

TEST(TrainStep, Bf16IsChosenOnlyWhenClearlyFaster) {
  EXPECT_TRUE(prefer_bf16(0.5, 1.0));    // AMX- or Zen-4-like: bf16 twice as fast
  EXPECT_TRUE(prefer_bf16(0.8, 1.0));    // the 1.25x edge itself
  EXPECT_FALSE(prefer_bf16(0.9, 1.0));   // near parity: not worth the rounding
  EXPECT_FALSE(prefer_bf16(1.8, 1.0));   // AVX512_BF16 without AMX under oneDNN 2.6, measured
  EXPECT_FALSE(prefer_bf16(0.0, 1.0));   // no timing
  // The probe the CPU backend decides by times both precisions of one gemm.
  const Bf16Timing t = time_bf16_vs_fp32(64, 32, 16, 2);
  EXPECT_GT(t.bf16_seconds, 0.0);
  EXPECT_GT(t.fp32_seconds, 0.0);
  EXPECT_LT(t.fp32_seconds, 1.0);
  // Whatever was decided, the backend says which precision `auto` takes.
  const std::string desc = cpu_backend().description();
  EXPECT_NE(desc.find(cpu_backend().native_bf16() ? "matmuls in bf16" : "matmuls in fp32"), std::string::npos) << desc;
}

TEST(TrainStep, DeviceNamesAreChecked) {
  EXPECT_EQ(make_backend("cpu")->name(), "cpu");
  EXPECT_NO_THROW(make_backend("auto"));
  EXPECT_EQ(available_backends().front(), "cpu");
  // cuda is refused only where no usable GPU is present; an index past the last device always is.
  std::vector<std::string> refused = {"tpu", "cuda:99", "cuda:x"};
  if (available_backends().size() == 1) refused.insert(refused.end(), {"cuda", "cuda:0"});
  for (const std::string& name : refused) {
    const char* bad = name.c_str();
    try {
      make_backend(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("--device"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}

TEST(TrainStep, AutoPrecisionTracksTheFp32Reference) {
  Curve ref = three_steps("fp32"), got = three_steps("auto");
  ASSERT_EQ(ref.loss.size(), 3u);
  // The loss must fall (the steps train), and at `auto` it stays within 1e-2 relative of the fp32
  // run: bf16 rounds matmul inputs to 8 mantissa bits (~4e-3 relative per product, averaging out
  // over the dot products), and three updates let the two weight trajectories drift only slightly.
  EXPECT_LT(ref.loss[2], ref.loss[0]);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(got.loss[i], ref.loss[i], 1e-2 * ref.loss[i]) << "step " << i;
    // Gradient norms of a random-init model are O(1); bf16 moves them by a few percent.
    EXPECT_NEAR(got.norm[i], ref.norm[i], 5e-2 * ref.norm[i]) << "step " << i;
  }
}

TEST(TrainStep, DeterministicForAGivenBinaryAndMachine) {
  for (const char* prec : {"auto", "fp32"}) {
    Curve a = three_steps(prec), b = three_steps(prec);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(a.loss[i], b.loss[i]) << prec << " step " << i;
      EXPECT_EQ(a.norm[i], b.norm[i]) << prec << " step " << i;
    }
  }
}

// Twenty steps with Muon's Newton-Schulz batched per group (newton_schulz_many) against one call per
// matrix, on a model whose matrices take both CPU paths (128x128 the loop path, 512x128 and
// 128x512 oneDNN, dealt whole to threads when batched) in bf16. Where the single-thread oneDNN
// kernels sum as the threaded ones do, the curves are the same to the bit; the bound allows
// another blocking: one-ulp differences of bf16 matmul inputs in the updates, 1e-3 relative.
TEST(TrainStep, BatchedNewtonSchulzTrainsLikeOneMatrixAtATime) {
  auto run = [](bool batched) {
    const int B = 2, T = 32;
    ModelConfig mc = small_model("bf16");
    mc.d_model = 128;
    mc.head_dim = 32;
    GPT model(mc, B, T);
    model.init_weights(5);
    OptimConfig oc = model_test::muon_optim("bf16");
    oc.matrix.ns_coeffs = "polar";
    Optimizer opt(model.params(), oc);
    opt.set_batched_ns(batched);
    opt.warmup();
    Curve c;
    const auto in = model_test::random_tokens(size_t(B) * T, mc.vocab_size, 11),
         tg = model_test::random_tokens(in.size(), mc.vocab_size, 12);
    for (int s = 0; s < 20; ++s) {
      StepResult r = train_step(model, &opt, in.data(), tg.data(), 1, B, T, ScheduleValues{1.0f, 1.0f, 0.9f});
      c.loss.push_back(r.loss);
      c.norm.push_back(r.grad_norm);
    }
    return c;
  };
  const Curve one = run(false), many = run(true);
  int same = 0;
  for (size_t i = 0; i < one.loss.size(); ++i) {
    EXPECT_NEAR(many.loss[i], one.loss[i], 1e-3 * one.loss[i]) << "step " << i;
    same += many.loss[i] == one.loss[i];
  }
  EXPECT_LT(one.loss.back(), one.loss.front());
  std::printf("[ info     ] %d of %zu losses bit-identical\n", same, one.loss.size());
}

TEST(TrainStep, NonFiniteLossThrowsAndLeavesTheWeights) {
  const int B = 1, T = 16;
  ModelConfig mc = small_model("auto");
  GPT model(mc, B, T);
  model.init_weights(3);
  Optimizer opt(model.params(), model_test::muon_optim("auto"));
  Param& wte = model.params().front();
  std::vector<float> w(size_t(wte.numel()));
  wte.to_host(w.data());
  auto in = model_test::random_tokens(size_t(B) * T, mc.vocab_size, 1),
       tg = model_test::random_tokens(in.size(), mc.vocab_size, 2);
  w[size_t(in[0]) * mc.d_model] = std::numeric_limits<float>::quiet_NaN();
  wte.from_host(w.data());
  model.weights_changed();
  Param& head = model.params().back();
  std::vector<float> before(size_t(head.numel())), after(before.size());
  head.to_host(before.data());
  EXPECT_THROW(train_step(model, &opt, in.data(), tg.data(), 1, B, T, ScheduleValues{}), NonFiniteError);
  head.to_host(after.data());
  EXPECT_EQ(before, after);
}

TEST(TrainStep, OneReadFromTheDevicePerStep) {
  // A whole step (two micro-batches, the multi-token head, AdamW and NorMuon groups) reads from
  // the device once, at its end, and never synchronizes; its losses and norm are those of the
  // same step on the CPU backend directly.
  const int B = 2, T = 16, accum = 2;
  ModelConfig mc = small_model("fp32");
  mc.mtp_weight = 0.3f;
  OptimConfig oc = model_test::muon_optim("fp32");
  oc.matrix.kind = "normuon";
  oc.grad_clip = 0.5f;
  test_util::CountingBackend counting;
  auto in = model_test::random_tokens(size_t(accum) * B * T, mc.vocab_size, 21),
       tg = model_test::random_tokens(in.size(), mc.vocab_size, 22);
  std::vector<StepResult> got;
  for (Backend* be : {static_cast<Backend*>(&counting), &cpu_backend()}) {
    GPT model(mc, B, T, *be);
    model.init_weights(9);
    Optimizer opt(model.params(), oc);
    for (int s = 0; s < 2; ++s) {
      const int reads = counting.reads, syncs = counting.syncs;
      got.push_back(train_step(model, &opt, in.data(), tg.data(), accum, B, T, ScheduleValues{1.0f, 1.0f, 0.9f}));
      if (be == &counting) {
        EXPECT_EQ(counting.reads - reads, 1) << "step " << s;
        EXPECT_EQ(counting.syncs - syncs, 0) << "step " << s;
      }
    }
  }
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(got[size_t(s)].loss, got[size_t(s) + 2].loss);
    EXPECT_EQ(got[size_t(s)].grad_norm, got[size_t(s) + 2].grad_norm);
    ASSERT_EQ(got[size_t(s)].aux.size(), 1u);
    EXPECT_EQ(got[size_t(s)].aux[0].second, got[size_t(s) + 2].aux[0].second);
    EXPECT_GT(got[size_t(s)].aux[0].second, 0.0);
  }
  EXPECT_NE(got[0].loss, got[1].loss);  // the first step changed the weights
}

TEST(TrainStep, NonFiniteGradientUpdatesNothing) {
  std::vector<float> d(12, 0.5f), g(12, 0.1f);
  Param p{"w", {3, 4}, ParamKind::Matrix, d.data(), g.data(), &cpu_backend()};
  std::vector<Param> params{p};
  Optimizer opt(params, model_test::muon_optim("fp32"));
  g[5] = std::numeric_limits<float>::infinity();
  float norm = opt.step(1.0f);
  EXPECT_FALSE(std::isfinite(norm));
  EXPECT_EQ(d, std::vector<float>(12, 0.5f));
}

TEST(TrainStep, QueuedStepsAreReadOnceTogether) {
  // Three steps queued in a StepWindow read nothing; its read is one to_host, and gives the last
  // step's loss, multi-token loss and norm bit for bit as train_step reading after each step.
  const int B = 2, T = 16, accum = 2;
  ModelConfig mc = small_model("fp32");
  mc.mtp_weight = 0.3f;
  OptimConfig oc = model_test::muon_optim("fp32");
  oc.matrix.kind = "normuon";
  oc.grad_clip = 0.5f;
  auto in = model_test::random_tokens(size_t(accum) * B * T, mc.vocab_size, 31),
       tg = model_test::random_tokens(in.size(), mc.vocab_size, 32);
  const ScheduleValues sv{1.0f, 1.0f, 0.9f};
  StepResult direct;
  {
    GPT model(mc, B, T);
    model.init_weights(9);
    Optimizer opt(model.params(), oc);
    for (int s = 0; s < 3; ++s) direct = train_step(model, &opt, in.data(), tg.data(), accum, B, T, sv);
  }
  test_util::CountingBackend counting;
  GPT model(mc, B, T, counting);
  model.init_weights(9);
  Optimizer opt(model.params(), oc);
  StepWindow window(counting, accum, 3);
  const int reads = counting.reads;
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(window.fits(accum));
    StepOptions so;
    so.scalars = window.next(accum);
    QueuedStep q;
    so.queued = &q;
    const StepResult r = train_step(model, &opt, in.data(), tg.data(), accum, B, T, sv, so);
    EXPECT_GT(r.seconds, 0.0);
    window.add(std::move(q), s);
  }
  EXPECT_FALSE(window.fits(accum));
  EXPECT_EQ(counting.reads, reads);
  EXPECT_EQ(counting.syncs, 0);
  const StepWindow::Read got = window.read(&opt);
  EXPECT_EQ(counting.reads, reads + 1);
  EXPECT_TRUE(got.error.empty()) << got.error;
  EXPECT_TRUE(window.empty());
  EXPECT_TRUE(window.fits(accum));
  EXPECT_EQ(got.last.loss, direct.loss);
  EXPECT_EQ(got.last.grad_norm, direct.grad_norm);
  ASSERT_EQ(got.last.aux.size(), 1u);
  EXPECT_EQ(got.last.aux[0].second, direct.aux[0].second);
}

TEST(TrainStep, QueuedNonFiniteStepIsNamedAndSkipped) {
  // Of three queued steps the middle one meets a NaN embedding row: its update is skipped on the
  // device (the head is what the first step left), the third is applied, and the read names step 1.
  const int B = 1, T = 16;
  ModelConfig mc = small_model("fp32");
  GPT model(mc, B, T);
  model.init_weights(3);
  Optimizer opt(model.params(), model_test::muon_optim("fp32"));
  auto in = model_test::random_tokens(size_t(B) * T, mc.vocab_size, 1),
       tg = model_test::random_tokens(in.size(), mc.vocab_size, 2);
  int32_t unused = 0;
  while (std::find(in.begin(), in.end(), unused) != in.end()) ++unused;
  std::vector<int32_t> bad_in = in;
  bad_in[0] = unused;
  Param& wte = model.params().front();
  std::vector<float> w(size_t(wte.numel()));
  wte.to_host(w.data());
  w[size_t(unused) * mc.d_model] = std::numeric_limits<float>::quiet_NaN();
  wte.from_host(w.data());
  model.weights_changed();
  Param& head = model.params().back();
  std::vector<float> after_first(size_t(head.numel())), after_second(after_first.size());
  StepWindow window(cpu_backend(), 1, 3);
  for (int s = 0; s < 3; ++s) {
    StepOptions so;
    so.scalars = window.next(1);
    QueuedStep q;
    so.queued = &q;
    EXPECT_NO_THROW(train_step(model, &opt, s == 1 ? bad_in.data() : in.data(), tg.data(), 1, B, T, ScheduleValues{}, so));
    window.add(std::move(q), s);
    head.to_host((s == 0 ? after_first : after_second).data());
    if (s == 1) EXPECT_EQ(after_first, after_second);
  }
  head.to_host(after_second.data());
  EXPECT_NE(after_first, after_second);
  const StepWindow::Read got = window.read(&opt);
  EXPECT_EQ(got.error_step, 1);
  EXPECT_NE(got.error.find("loss is nan"), std::string::npos) << got.error;
  EXPECT_TRUE(std::isfinite(got.last.loss));
}

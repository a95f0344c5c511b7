// Recorded training steps (train/step_graph.h) on a backend that records as a GPU does
// (test_recording_backend_util.h): replayed steps train bit for bit as steps queued op by op, with
// every feature whose inputs change from step to step (tokens, bigram rows, the token after next,
// learning rates, step counts, momentum, micro-batches, a step window's moving scalars); a new
// shape or divisor is queued op by op before it is recorded; a stale recording is recorded again;
// a step that moves memory inside a recording falls back (auto) or fails (on); `train` refuses
// train.graph=on where nothing records, before it makes its folder.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "core/common.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "train/step_graph.h"
#include "train/step_window.h"
#include "train/train_step.h"
#include "test_cli_util.h"
#include "test_model_util.h"
#include "test_run_util.h"
#include "test_recording_backend_util.h"

using namespace clm;
using namespace run_test;
using cli_test::run_clocklm;

namespace {

ModelConfig featured_model() {
  ModelConfig c = model_test::tiny_config();
  c.zero_init_out = false;
  c.matmul_precision = "bf16";  // the bf16 weight mirror is refreshed inside the step
  c.bigram_buckets = 64;        // rows the host derives from the tokens
  c.mtp_weight = 0.3f;          // targets the host derives, and a second divisor
  c.value_embeds = 1;
  c.x0_skips = true;
  return c;
}

OptimConfig featured_optim() {
  OptimConfig o = model_test::muon_optim("bf16");
  o.grad_clip = 0.5f;
  return o;
}

// Each step's schedule values differ, as a run's warmup and warmdown make them.
ScheduleValues sched_at(int s) { return {1.0f - 0.1f * float(s), 1.0f - 0.05f * float(s), 0.85f + 0.01f * float(s)}; }

struct Trained {
  std::vector<double> loss, mtp;
  std::vector<float> norm;
  std::vector<float> weights;
};

std::vector<float> all_weights(GPT& model) {
  std::vector<float> w;
  for (const Param& p : model.params()) {
    std::vector<float> x(size_t(p.numel()));
    p.to_host(x.data());
    w.insert(w.end(), x.begin(), x.end());
  }
  return w;
}

// `steps` steps of `accum` micro-batches of new tokens each, on `be`, through `graph` (or none).
Trained train(Backend& be, StepGraph* graph, int steps, int64_t accum, bool window) {
  const int B = 2, T = 16;
  const ModelConfig mc = featured_model();
  GPT model(mc, B, T, be);
  model.init_weights(7);
  Optimizer opt(model.params(), featured_optim());
  StepWindow win(be, accum, 3);  // read every third step: each step gets another slice
  Trained t;
  auto read = [&] {
    const StepWindow::Read got = win.read(&opt);
    EXPECT_TRUE(got.error.empty()) << got.error;
    t.loss.push_back(got.last.loss);
    t.mtp.push_back(got.last.aux.at(0).second);
    t.norm.push_back(got.last.grad_norm);
  };
  for (int s = 0; s < steps; ++s) {
    const auto in = model_test::random_tokens(size_t(accum) * B * T, mc.vocab_size, 100 + s),
               tg = model_test::random_tokens(in.size(), mc.vocab_size, 200 + s);
    StepOptions so;
    so.graph = graph;
    if (window) {
      if (!win.fits(accum)) read();
      QueuedStep q;
      so.scalars = win.next(accum);
      so.queued = &q;
      train_step(model, &opt, in.data(), tg.data(), accum, B, T, sched_at(s), so);
      win.add(std::move(q), s);
      continue;
    }
    const StepResult r = train_step(model, &opt, in.data(), tg.data(), accum, B, T, sched_at(s), so);
    t.loss.push_back(r.loss);
    t.mtp.push_back(r.aux.at(0).second);
    t.norm.push_back(r.grad_norm);
  }
  if (window) read();
  t.weights = all_weights(model);
  return t;
}

void expect_same(const Trained& a, const Trained& b) {
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.mtp, b.mtp);
  EXPECT_EQ(a.norm, b.norm);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  EXPECT_EQ(std::memcmp(a.weights.data(), b.weights.data(), 4 * a.weights.size()), 0);
}

}  // namespace

TEST(StepGraph, ReplayedStepsTrainLikeStepsQueuedOpByOp) {
  for (const int64_t accum : {1, 2}) {
    const Trained queued = train(cpu_backend(), nullptr, 6, accum, false);
    test_util::RecordingBackend rec;
    StepGraph graph;
    const Trained replayed = train(rec, &graph, 6, accum, false);
    expect_same(queued, replayed);
    // Step 0 op by op, step 1 recorded and replayed, steps 2..5 replayed.
    EXPECT_EQ(graph.stats().unrecorded, 1);
    EXPECT_EQ(graph.stats().recorded, 1);
    EXPECT_EQ(graph.stats().replayed, 5);
    EXPECT_EQ(rec.replays, 5);
    // The losses moved: the replays ran new tokens with the new weights.
    EXPECT_NE(queued.loss[4], queued.loss[5]);
  }
}

TEST(StepGraph, ReplayedStepsWriteToAMovingStepWindow) {
  // A step window hands each step another slice for its scalars; the recorded step writes to one
  // place and its scalars are copied to the slice after it.
  const Trained queued = train(cpu_backend(), nullptr, 6, 2, true);
  test_util::RecordingBackend rec;
  StepGraph graph;
  const Trained replayed = train(rec, &graph, 6, 2, true);
  ASSERT_EQ(queued.loss.size(), 2u);  // steps 2 and 5, each read with the two before it
  expect_same(queued, replayed);
  EXPECT_EQ(graph.stats().replayed, 5);
}

TEST(StepGraph, AnOffGraphOrANonRecordingBackendQueuesOpByOp) {
  test_util::RecordingBackend rec;
  StepGraph off(GraphMode::Off);
  EXPECT_FALSE(off.active(rec));
  StepGraph on(GraphMode::On);
  EXPECT_FALSE(on.active(cpu_backend()));  // the CPU runs each op as it is issued
  EXPECT_THROW(on.run(cpu_backend(), StepKey{}, [] {}), Error);
  const Trained queued = train(cpu_backend(), nullptr, 3, 1, false);
  const Trained with_off = train(rec, &off, 3, 1, false);
  expect_same(queued, with_off);
  EXPECT_EQ(rec.recordings, 0);
  EXPECT_EQ(graph_mode_from_name("auto"), GraphMode::Auto);
  EXPECT_EQ(graph_mode_from_name("on"), GraphMode::On);
  EXPECT_EQ(graph_mode_from_name("off"), GraphMode::Off);
  EXPECT_THROW(graph_mode_from_name("yes"), Error);
}

TEST(StepGraph, EachKeyIsQueuedOnceThenRecordedAndAStaleOneAgain) {
  test_util::RecordingBackend rec;
  StepGraph graph;
  int issued = 0;
  auto issue = [&] {
    ++issued;
    rec.zero(nullptr, 0);
  };
  StepKey a{.B = 2, .T = 16, .counts = {{32, 30}}}, b = a;
  b.counts[0].first = 31;  // one ignored target: another divisor, another recording
  graph.run(rec, a, issue);  // first sight: op by op
  graph.run(rec, a, issue);  // recorded (issue runs inside the recording), replayed
  graph.run(rec, a, issue);  // replayed
  EXPECT_EQ(issued, 2);
  graph.run(rec, b, issue);  // b's first sight
  EXPECT_EQ(issued, 3);
  EXPECT_EQ(graph.stats().unrecorded, 2);
  rec.move_memory();         // every recording stale
  graph.run(rec, a, issue);  // recorded again
  EXPECT_EQ(issued, 4);
  EXPECT_EQ(rec.stale_replays, 1);
  EXPECT_EQ(graph.stats().recorded, 2);
  EXPECT_EQ(graph.stats().replayed, 3);
  // At most kKeep keys are kept, the least recently used dropped.
  for (int i = 0; i < 6; ++i) {
    StepKey k = a;
    k.T = 100 + i;
    graph.run(rec, k, issue);
  }
  EXPECT_EQ(graph.kept(), int64_t(StepGraph::kKeep));
}

TEST(StepGraph, MovingMemoryInsideARecordingFallsBackOrFails) {
  test_util::RecordingBackend rec;
  DeviceBuffer buf(rec, 64);
  const float one = 1.0f;
  int issued = 0;
  auto upload = [&] {
    ++issued;
    rec.to_device(buf.as<float>(), &one, sizeof one);  // refused inside a recording
  };
  StepGraph autog;
  const StepKey k{.B = 1, .T = 1, .counts = {{1, 0}}};
  autog.run(rec, k, upload);
  testing::internal::CaptureStderr();
  autog.run(rec, k, upload);  // the recording fails: said once, then op by op
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("to_device inside a recording"), std::string::npos) << said;
  autog.run(rec, k, upload);
  EXPECT_EQ(autog.stats().failed, 1);
  EXPECT_EQ(autog.stats().unrecorded, 3);
  EXPECT_EQ(issued, 4);  // three steps op by op and the one failed recording
  StepGraph on(GraphMode::On);
  on.run(rec, k, upload);
  EXPECT_THROW(on.run(rec, k, upload), Error);
}

TEST(StepGraph, TrainRefusesGraphOnWhereNothingRecordsBeforeMakingItsFolder) {
  const std::string run = temp_run("graph_on");
  std::string out;
  EXPECT_NE(run_clocklm("train" + kTiny + " --set max_steps=1 --set train.graph=on --data " + tiny_dataset() +
                            " --device cpu --out " + run,
                        &out),
            0);
  EXPECT_NE(out.find("train.graph=on: cpu cannot record a step"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(run));
  EXPECT_NE(run_clocklm("train" + kTiny + " --set train.graph=sometimes --data " + tiny_dataset() + " --out " + run,
                        &out),
            0);
  EXPECT_NE(out.find("train.graph 'sometimes' is unknown"), std::string::npos) << out;
}

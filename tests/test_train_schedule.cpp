// The budget clock and the schedules, without a model: the clock stops within one step of the
// budget for steady, noisy and drifting step times; lr/momentum/wd follow the budget fraction.
#include <gtest/gtest.h>

#include <cmath>

#include "core/common.h"
#include "config/config.h"
#include "train/budget.h"
#include "train/schedule.h"

using namespace clm;

namespace {

// Runs the clock with step durations from `dur(i)`; returns (used, steps, max step seen).
struct Sim {
  double used;
  int steps;
  double max_step;
};
template <typename F>
Sim simulate(double budget, F dur) {
  BudgetClock c;
  c.budget = budget;
  int i = 0;
  double mx = 0;
  while (c.next_step_fits()) {
    double d = dur(i++);
    mx = std::max(mx, d);
    c.add_step(d);
    if (i > 1000000) break;
  }
  return {c.used, i, mx};
}

}  // namespace

TEST(TrainBudget, StopsWithinOneStepOfTheBudget) {
  Rng rng(5);
  auto check = [](const Sim& s, double budget, const char* what) {
    // Never more than one step past the budget, and never stopping while a whole step still fits.
    EXPECT_LE(s.used, budget + s.max_step) << what;
    EXPECT_GT(s.used, budget - s.max_step) << what;
  };
  check(simulate(10.5, [](int) { return 1.0; }), 10.5, "steady");
  Sim steady = simulate(10.5, [](int) { return 1.0; });
  EXPECT_EQ(steady.steps, 10);  // the 11th step would end at 11 > 10.5
  EXPECT_DOUBLE_EQ(steady.used, 10.0);
  check(simulate(60, [&](int) { return 0.5 + rng.uniform(); }), 60, "noisy");
  check(simulate(60, [](int i) { return i == 0 ? 5.0 : 0.7; }), 60, "slow first step");
  check(simulate(60, [](int i) { return 0.2 + 0.01 * i; }), 60, "drifting");
  // A budget smaller than one step: exactly one step runs.
  EXPECT_EQ(simulate(0.5, [](int) { return 2.0; }).steps, 1);
  // Restored used >= budget: nothing runs.
  BudgetClock c;
  c.budget = 10;
  c.used = 10;
  EXPECT_FALSE(c.next_step_fits());
  EXPECT_DOUBLE_EQ(c.fraction(), 1.0);
}

TEST(TrainBudget, PredictionIsTheRecentMedian) {
  BudgetClock c;
  c.budget = 100;
  EXPECT_EQ(c.predict_next(), 0);
  for (double d : {9.0, 1.0, 1.2, 0.9, 1.1}) c.add_step(d);
  EXPECT_DOUBLE_EQ(c.predict_next(), 1.1);  // the slow first step does not dominate
  for (int i = 0; i < 5; ++i) c.add_step(2.0);
  EXPECT_DOUBLE_EQ(c.predict_next(), 2.0);  // only the last kWindow steps count
  EXPECT_EQ(int(c.recent.size()), BudgetClock::kWindow);
}

TEST(TrainSchedule, FollowsTheBudgetFraction) {
  TrainConfig t;
  t.warmup_frac = 0.1f;
  t.warmdown_frac = 0.4f;
  t.final_lr_frac = 0.0f;
  t.muon_momentum_start = 0.85f;
  t.muon_momentum_warmup_frac = 0.2f;
  t.wd_schedule = "linear";
  auto at = [&](double f) { return schedule_at(t, 0.95f, f); };
  EXPECT_NEAR(at(0.0).lr_scale, 0.0, 1e-6);
  EXPECT_NEAR(at(0.05).lr_scale, 0.5, 1e-6);
  EXPECT_NEAR(at(0.1).lr_scale, 1.0, 1e-6);
  EXPECT_NEAR(at(0.3).lr_scale, 1.0, 1e-6);
  EXPECT_NEAR(at(0.6).lr_scale, 1.0, 1e-6);
  EXPECT_NEAR(at(0.8).lr_scale, 0.5, 1e-6);  // halfway through the warmdown
  EXPECT_NEAR(at(1.0).lr_scale, 0.0, 1e-6);  // warmdown complete exactly at the end of the budget
  EXPECT_NEAR(at(1.5).lr_scale, 0.0, 1e-6);  // clamped
  EXPECT_NEAR(at(0.0).muon_momentum, 0.85, 1e-6);
  EXPECT_NEAR(at(0.1).muon_momentum, 0.90, 1e-6);
  EXPECT_NEAR(at(0.2).muon_momentum, 0.95, 1e-6);
  EXPECT_NEAR(at(0.7).muon_momentum, 0.95, 1e-6);
  EXPECT_NEAR(at(0.25).wd_scale, 0.75, 1e-6);
  t.wd_schedule = "lr";
  EXPECT_NEAR(at(0.8).wd_scale, 0.5, 1e-6);
  t.wd_schedule = "constant";
  EXPECT_NEAR(at(0.8).wd_scale, 1.0, 1e-6);
  t.final_lr_frac = 0.1f;
  EXPECT_NEAR(at(1.0).lr_scale, 0.1, 1e-6);
  EXPECT_NEAR(at(0.8).lr_scale, 0.55, 1e-6);
  // Monotone non-increasing after the warmup, in either shape.
  for (const char* shape : {"linear", "sqrt"}) {
    t.warmdown_shape = shape;
    float prev = 2;
    for (int i = 10; i <= 100; ++i) {
      float v = at(i / 100.0).lr_scale;
      EXPECT_LE(v, prev + 1e-7f) << shape;
      prev = v;
    }
  }
  // The sqrt shape goes sqrt(p) of the way down: a quarter through the warmdown (frac 0.7), half of
  // the way from 1 to 0.1; it meets the linear shape at both ends.
  t.warmdown_shape = "sqrt";
  EXPECT_NEAR(at(0.59).lr_scale, 1.0, 1e-6);
  EXPECT_NEAR(at(0.7).lr_scale, 0.55, 1e-6);
  EXPECT_NEAR(at(0.8).lr_scale, 1.0 - 0.9 * std::sqrt(0.5), 1e-6);
  EXPECT_NEAR(at(1.0).lr_scale, 0.1, 1e-6);
}

TEST(TrainSchedule, RowLengthStages) {
  const std::vector<SeqStage> st = parse_seq_schedule("128@0.25,256@0.5", 1024);
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].seq_len, 128);
  EXPECT_DOUBLE_EQ(st[1].until, 0.5);
  EXPECT_EQ(seq_len_at(st, 1024, 0.0), 128);
  EXPECT_EQ(seq_len_at(st, 1024, 0.2499), 128);
  EXPECT_EQ(seq_len_at(st, 1024, 0.25), 256);
  EXPECT_EQ(seq_len_at(st, 1024, 0.5), 1024);
  EXPECT_EQ(seq_len_at(st, 1024, 1.0), 1024);
  EXPECT_EQ(seq_len_at({}, 1024, 0.0), 1024);  // no schedule: full rows throughout
  EXPECT_TRUE(parse_seq_schedule("", 1024).empty());
  EXPECT_EQ(seq_len_at(parse_seq_schedule("64@1", 1024), 1024, 0.999), 64);
  // Refused, each with a message naming the key.
  for (const char* bad : {"256", "256@", "@0.5", "x@0.5", "256@abc", "256@0", "256@1.5", "300@0.5", "1024@0.5",
                          "2048@0.5", "256@0.5,128@0.7", "128@0.5,256@0.4", "256@0.5,", "256@nan", "-256@0.5"}) {
    try {
      parse_seq_schedule(bad, 1024);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("train.seq_schedule"), std::string::npos) << e.what();
    }
  }
  // validate() checks it against the model's seq_len.
  EXPECT_THROW(load_config("d4", {"train.seq_schedule=96@0.5"}), Error);
  EXPECT_EQ(load_config("d4", {"train.seq_schedule=256@0.5"}).train.seq_schedule, "256@0.5");
}

TEST(TrainSchedule, BatchSizeStages) {
  const std::vector<BatchStage> st = parse_batch_schedule("1024@0.25,2048@0.5", 4096, 512);
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].tokens, 1024);
  EXPECT_DOUBLE_EQ(st[1].until, 0.5);
  EXPECT_EQ(batch_tokens_at(st, 4096, 0.0), 1024);
  EXPECT_EQ(batch_tokens_at(st, 4096, 0.2499), 1024);
  EXPECT_EQ(batch_tokens_at(st, 4096, 0.25), 2048);
  EXPECT_EQ(batch_tokens_at(st, 4096, 0.5), 4096);
  EXPECT_EQ(batch_tokens_at(st, 4096, 1.0), 4096);
  EXPECT_EQ(batch_tokens_at({}, 4096, 0.0), 4096);  // no schedule: batch_tokens throughout
  EXPECT_TRUE(parse_batch_schedule("", 4096, 512).empty());
  EXPECT_EQ(batch_tokens_at(parse_batch_schedule("512@1", 4096, 512), 4096, 0.999), 512);
  // Refused, each with a message naming the key: not a multiple of a micro-batch, not smaller than
  // batch_tokens, sizes or fractions not increasing, malformed.
  for (const char* bad : {"1024", "1024@", "@0.5", "x@0.5", "1024@abc", "1024@0", "1024@1.5", "1000@0.5", "4096@0.5",
                          "8192@0.5", "2048@0.5,1024@0.7", "1024@0.5,2048@0.4", "1024@0.5,", "1024@nan", "-1024@0.5",
                          "0@0.5", "99999999999999@0.5"}) {
    try {
      parse_batch_schedule(bad, 4096, 512);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("train.batch_schedule"), std::string::npos) << e.what();
    }
  }
  // validate() checks it against batch_tokens and the micro-batch (d4: 4 x 1024 = 4096 per step).
  EXPECT_THROW(load_config("d4", {"train.batch_schedule=2048@0.5"}), Error);
  EXPECT_THROW(load_config("d4", {"train.batch_tokens=8192", "train.batch_schedule=6000@0.5"}), Error);
  EXPECT_EQ(load_config("d4", {"train.batch_tokens=8192", "train.batch_schedule=4096@0.5"}).train.batch_schedule,
            "4096@0.5");
}

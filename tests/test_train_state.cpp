// The trainer's checkpoint state without a model: to_json and from_json agree, the keys are the
// ones older checkpoints hold (so they resume), the `rng` of older checkpoints is ignored, absent
// optional keys take their documented defaults, and a missing required key is a one-line error.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/common.h"
#include "train/train_state.h"

using namespace clm;

namespace {

TrainState sample_state() {
  TrainState s;
  s.step = 42;
  s.tokens = 42 * 8192;
  s.model_flops = 1.25e12;
  s.clock.budget = 600;
  s.clock.used = 123.5;
  s.clock.recent = {2.5, 2.25, 2.75};
  s.next_eval_at = 240;
  s.next_ckpt_at = 300;
  s.last_val = {{"step", 40}, {"val_bpb", 1.75}, {"val_tokens", 131072}};
  s.world = 2;
  s.loaders = {nlohmann::json{{"epoch", 0}, {"pos", 84}}, nlohmann::json{{"epoch", 0}, {"pos", 85}}};
  s.tokenizer_hash = "abc123";
  s.reason = "periodic";
  return s;
}

TEST(TrainState, JsonRoundTripKeepsEveryField) {
  const TrainState s = sample_state();
  const TrainState r = TrainState::from_json(s.to_json(), TrainState{}, 1.0, "ckpt");
  EXPECT_EQ(r.step, s.step);
  EXPECT_EQ(r.tokens, s.tokens);
  EXPECT_EQ(r.model_flops, s.model_flops);
  EXPECT_EQ(r.clock.budget, s.clock.budget);
  EXPECT_EQ(r.clock.used, s.clock.used);
  EXPECT_EQ(r.clock.recent, s.clock.recent);
  EXPECT_EQ(r.next_eval_at, s.next_eval_at);
  EXPECT_EQ(r.next_ckpt_at, s.next_ckpt_at);
  EXPECT_EQ(r.last_val, s.last_val);
  EXPECT_EQ(r.world, s.world);
  EXPECT_EQ(r.loaders, s.loaders);
  EXPECT_EQ(r.tokenizer_hash, s.tokenizer_hash);
  EXPECT_EQ(r.reason, s.reason);
  EXPECT_EQ(r.to_json(), s.to_json());
}

TEST(TrainState, WritesTheKeysOlderCheckpointsHoldLessRng) {
  const nlohmann::json j = sample_state().to_json();
  std::set<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
  const std::set<std::string> expected = {"step",        "tokens",       "model_flops", "budget_used",
                                          "budget_seconds", "recent_step_seconds", "loader", "loaders",
                                          "world",       "next_eval_at", "next_ckpt_at", "last_val",
                                          "tokenizer_hash", "reason"};
  EXPECT_EQ(keys, expected);
  EXPECT_EQ(j["loader"], j["loaders"][0]);  // rank 0's position, for readers of one-rank files
}

TEST(TrainState, OlderStateWithRngAndWithoutOptionalKeysLoads) {
  // What the trainer wrote before `loaders`, `model_flops` and the cadence keys existed, with the rng.
  const nlohmann::json old = {{"step", 10},
                              {"tokens", 40960},
                              {"budget_used", 30.0},
                              {"loader", {{"epoch", 1}, {"pos", 7}}},
                              {"rng", {1u, 2u, 3u, 4u}}};
  TrainState fallback;
  fallback.clock.budget = 900;
  fallback.next_eval_at = 120;
  fallback.next_ckpt_at = 300;
  const TrainState s = TrainState::from_json(old, fallback, 1000.0, "old.ckpt");
  EXPECT_EQ(s.step, 10);
  EXPECT_EQ(s.tokens, 40960);
  EXPECT_EQ(s.model_flops, 40960.0 * 1000.0);  // every token at the full row length
  EXPECT_EQ(s.clock.used, 30.0);
  EXPECT_EQ(s.clock.budget, 900);
  EXPECT_TRUE(s.clock.recent.empty());
  EXPECT_EQ(s.next_eval_at, 120);
  EXPECT_EQ(s.next_ckpt_at, 300);
  EXPECT_TRUE(s.last_val.is_null());
  EXPECT_EQ(s.world, 1);
  ASSERT_EQ(s.loaders.size(), 1u);
  EXPECT_EQ(s.loaders[0], old["loader"]);
  EXPECT_EQ(s.tokenizer_hash, "");
}

TEST(TrainState, MissingOrMistypedKeysAreOneLineErrors) {
  nlohmann::json j = sample_state().to_json();
  j.erase("budget_used");
  try {
    TrainState::from_json(j, TrainState{}, 1.0, "run/checkpoints/step_00000042.ckpt");
    FAIL() << "a state without budget_used loaded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("step_00000042.ckpt"), std::string::npos) << msg;
    EXPECT_NE(msg.find("budget_used"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  nlohmann::json bad = sample_state().to_json();
  bad["step"] = "ten";
  EXPECT_THROW(TrainState::from_json(bad, TrainState{}, 1.0, "x.ckpt"), Error);
  bad = sample_state().to_json();
  bad.erase("loaders");
  bad.erase("loader");
  EXPECT_THROW(TrainState::from_json(bad, TrainState{}, 1.0, "x.ckpt"), Error);
  EXPECT_THROW(TrainState::from_json(nlohmann::json::array(), TrainState{}, 1.0, "x.ckpt"), Error);
}

}  // namespace

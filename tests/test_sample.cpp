// Tests for next-token sampling (temperature, top-k, seeding). The KV-cache generator is compared
// with full recomputation in test_sample_kv.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/sample.h"

using namespace clm;

TEST(Sample, TemperatureZeroIsArgmax) {
  float logits[5] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
  Rng rng(1);
  EXPECT_EQ(sample_token(logits, 5, 0.0f, 0, rng), 1);  // first of the tied maxima
  EXPECT_EQ(sample_token(logits, 5, 0.7f, 1, rng), 1);  // top-1 is greedy at any temperature
  EXPECT_THROW(sample_token(logits, 5, -1.0f, 0, rng), Error);
}

TEST(Sample, DeterministicForASeedAndFollowsSoftmax) {
  float logits[3] = {0.0f, std::log(2.0f), -100.0f};
  auto draw = [&](uint64_t seed, int n, float temp, int k) {
    Rng rng(seed);
    std::vector<int> out;
    for (int i = 0; i < n; i++) out.push_back(sample_token(logits, 3, temp, k, rng));
    return out;
  };
  EXPECT_EQ(draw(7, 50, 1.0f, 0), draw(7, 50, 1.0f, 0));
  EXPECT_NE(draw(7, 50, 1.0f, 0), draw(8, 50, 1.0f, 0));
  auto xs = draw(3, 6000, 1.0f, 0);
  int ones = 0, twos = 0;
  for (int x : xs) { ones += x == 1; twos += x == 2; }
  EXPECT_NEAR(ones / 6000.0, 2.0 / 3, 0.03);  // p = 2/3, sd ~ 0.006
  EXPECT_EQ(twos, 0);
  // Temperature 2: p(1) = sqrt2/(1+sqrt2) ~ 0.586.
  auto hs = draw(4, 6000, 2.0f, 0);
  ones = 0;
  for (int x : hs) ones += x == 1;
  EXPECT_NEAR(ones / 6000.0, std::sqrt(2.0) / (1 + std::sqrt(2.0)), 0.03);
  // Top-k=2 never picks the third token even at a huge temperature.
  for (int x : draw(5, 2000, 1000.0f, 2)) EXPECT_NE(x, 2);
}

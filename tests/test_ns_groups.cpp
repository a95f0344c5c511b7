// The Newton-Schulz grouping plan (backend/ns_groups.h): matrices grouped by the shape the
// iteration works on (a tall matrix as its transpose), groups in the order of their first member,
// members in index order, one-matrix groups and no matrices at all; the gather and scatter indices
// of a stack; the bf16 size rule; and `clocklm bench ns --config`, which times the Newton-Schulz of
// every Muon matrix of a config's training step.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/ns_groups.h"
#include "test_cli_util.h"

namespace clm {
namespace {

TEST(NsGroups, GroupsByIteratedShapeInFirstSeenOrder) {
  // 192x768 and its transpose 768x192 share a group; 192x192 twice; 24x40 and 40x24; 136x300 alone.
  const std::vector<int64_t> rows = {192, 24, 768, 192, 40, 136, 192};
  const std::vector<int64_t> cols = {768, 40, 192, 192, 24, 300, 192};
  const std::vector<NsGroup> g = ns_groups(rows.data(), cols.data(), int(rows.size()));
  ASSERT_EQ(g.size(), 4u);
  EXPECT_EQ(g[0].a, 192);
  EXPECT_EQ(g[0].b, 768);
  EXPECT_EQ(g[0].members, (std::vector<int>{0, 2}));
  EXPECT_EQ(g[0].transposed, (std::vector<bool>{false, true}));
  EXPECT_EQ(g[1].a, 24);
  EXPECT_EQ(g[1].b, 40);
  EXPECT_EQ(g[1].members, (std::vector<int>{1, 4}));
  EXPECT_EQ(g[1].transposed, (std::vector<bool>{false, true}));
  EXPECT_EQ(g[2].a, 192);
  EXPECT_EQ(g[2].b, 192);
  EXPECT_EQ(g[2].members, (std::vector<int>{3, 6}));
  EXPECT_EQ(g[2].transposed, (std::vector<bool>{false, false}));  // square: never transposed
  EXPECT_EQ(g[3].a, 136);
  EXPECT_EQ(g[3].b, 300);
  EXPECT_EQ(g[3].members, (std::vector<int>{5}));  // a one-matrix group
  EXPECT_EQ(g[3].count(), 1);
  EXPECT_EQ(g[0].floats(), 2 * 192 * 768);
}

TEST(NsGroups, EveryMatrixInExactlyOneGroup) {
  std::vector<int64_t> rows, cols;
  for (int i = 0; i < 60; ++i) {  // 4 shapes, each tall or wide by turns
    const int64_t s = 8 * (1 + i % 4), l = 3 * s;
    rows.push_back(i % 3 ? s : l);
    cols.push_back(i % 3 ? l : s);
  }
  const std::vector<NsGroup> g = ns_groups(rows.data(), cols.data(), int(rows.size()));
  ASSERT_EQ(g.size(), 4u);
  std::vector<int> seen(rows.size(), 0);
  for (const NsGroup& grp : g) {
    ASSERT_EQ(grp.members.size(), grp.transposed.size());
    for (size_t k = 0; k < grp.members.size(); ++k) {
      const int i = grp.members[k];
      if (k > 0) {
        EXPECT_LT(grp.members[k - 1], i);  // index order within a group
      }
      ++seen[size_t(i)];
      EXPECT_EQ(bool(grp.transposed[k]), rows[size_t(i)] > cols[size_t(i)]);
      EXPECT_EQ(grp.transposed[k] ? cols[size_t(i)] : rows[size_t(i)], grp.a);
      EXPECT_EQ(grp.transposed[k] ? rows[size_t(i)] : cols[size_t(i)], grp.b);
    }
  }
  for (int n : seen) EXPECT_EQ(n, 1);
  for (size_t k = 1; k < g.size(); ++k) EXPECT_LT(g[k - 1].members[0], g[k].members[0]);  // first-seen order
}

TEST(NsGroups, NoMatricesNoGroups) {
  EXPECT_TRUE(ns_groups(nullptr, nullptr, 0).empty());
  const int64_t r = 5, c = 7;
  const std::vector<NsGroup> one = ns_groups(&r, &c, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].members, (std::vector<int>{0}));
}

// The stack's gather and scatter as the CUDA kernels run them (ns_stack_load_k, ns_stack_store_k):
// a wide member's X is its G, a tall member's its transpose, and storing X back gives G again.
TEST(NsGroups, StackLoadAndStoreIndices) {
  const int64_t rows[3] = {5, 7, 5}, cols[3] = {7, 5, 7};
  const std::vector<NsGroup> g = ns_groups(rows, cols, 3);
  ASSERT_EQ(g.size(), 1u);
  const int64_t a = g[0].a, b = g[0].b, n = a * b;
  std::vector<std::vector<float>> G(3);
  for (int k = 0; k < 3; ++k)
    for (int64_t e = 0; e < n; ++e) G[size_t(k)].push_back(float(100 * k + e));
  std::vector<float> X(size_t(3 * n));
  for (int k = 0; k < 3; ++k)
    for (int64_t e = 0; e < n; ++e)
      X[size_t(k * n + e)] = G[size_t(k)][size_t(ns_load_index(e, a, b, g[0].transposed[size_t(k)]))];
  for (int k = 0; k < 3; ++k) {
    const bool tr = g[0].transposed[size_t(k)];
    EXPECT_EQ(tr, k == 1);
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < b; ++j)  // G is a x b, or b x a (rows 7) when tall
        ASSERT_EQ(X[size_t(k * n + i * b + j)], tr ? G[size_t(k)][size_t(j * a + i)] : G[size_t(k)][size_t(i * b + j)]);
    std::vector<float> out(static_cast<size_t>(n));
    for (int64_t o = 0; o < n; ++o) out[size_t(o)] = X[size_t(k * n + ns_store_index(o, a, b, tr))];
    EXPECT_EQ(out, G[size_t(k)]);
  }
}

TEST(NsGroups, Bf16OnlyAboveTheSmallSize) {
  // 128*128*256 multiply-adds per X X^T is the last fp32 size; fp32 precision never rounds.
  EXPECT_FALSE(ns_uses_bf16(MatPrec::BF16, 128, 256));
  EXPECT_TRUE(ns_uses_bf16(MatPrec::BF16, 128, 257));
  EXPECT_TRUE(ns_uses_bf16(MatPrec::BF16, 192, 768));
  EXPECT_FALSE(ns_uses_bf16(MatPrec::F32, 192, 768));
}

// speedrun-10m: 3 layers of q, k, v, o (192x192) and the MLP's 768x192 and 192x768, all Muon: 18
// matrices of 2 iterated shapes in one batch (well under the optimizer's 2^24-float cap).
TEST(NsBench, ConfigTimesEveryMuonMatrix) {
  std::string out;
  ASSERT_EQ(cli_test::run_clocklm("bench ns --device cpu --threads 1 --config speedrun-10m --set model.vocab_size=512 "
                                  "--reps 1 --json",
                                  &out),
            0)
      << out;
  const nlohmann::json j = nlohmann::json::parse(out.substr(out.rfind('{')));
  EXPECT_EQ(j["matrices"], 18);
  EXPECT_EQ(j["shapes"], 2);
  EXPECT_EQ(j["calls"], 1);
  EXPECT_GT(j["ms_best"].get<double>(), 0.0);
  // The FLOPs are op_cost::newton_schulz's for each (5 steps of 4 a^2 b + 2 a^3): 12 of 192x192 and
  // 6 of 192x768, over the time.
  const double a = 192, flops = 5 * (12 * (4 * a * a * a + 2 * a * a * a) + 6 * (4 * a * a * 768 + 2 * a * a * a));
  EXPECT_NEAR(j["gflops"].get<double>() * j["ms_best"].get<double>() * 1e6, flops, 1e-6 * flops);
  EXPECT_NE(cli_test::run_clocklm("bench ns --device cpu --config no-such-config --reps 1", &out), 0);
}

}  // namespace
}  // namespace clm

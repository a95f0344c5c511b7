// token_splits (the cuts of each token into two tokens, from sorted prefixes and suffixes) against
// the direct way of looking up every prefix and suffix, on random vocabularies over small
// alphabets where many cuts exist, and its cap on the number of cuts.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/common.h"
#include "tok/token_splits.h"

using namespace clm;

namespace {

std::vector<TokenSplit> direct_splits(const std::vector<std::string_view>& toks) {
  std::map<std::string_view, uint32_t> index;
  for (size_t i = 0; i < toks.size(); ++i) index[toks[i]] = uint32_t(i);
  std::vector<TokenSplit> out;
  for (size_t i = 0; i < toks.size(); ++i)
    for (size_t k = 1; k < toks[i].size(); ++k) {
      auto l = index.find(toks[i].substr(0, k)), r = index.find(toks[i].substr(k));
      if (l != index.end() && r != index.end()) out.push_back({uint32_t(i), l->second, r->second});
    }
  return out;
}

bool same(const std::vector<TokenSplit>& a, const std::vector<TokenSplit>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].token != b[i].token || a[i].left != b[i].left || a[i].right != b[i].right) return false;
  return true;
}

}  // namespace

TEST(TokenSplits, EqualLookingUpEveryCut) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    const int alphabet = 1 + round % 4, max_len = 1 + round % 12;
    std::set<std::string> uniq;
    for (int i = 0; i < 60; ++i) {
      std::string s(size_t(1 + rng() % unsigned(max_len)), 'a');
      for (char& c : s) c = char('a' + rng() % unsigned(alphabet));
      uniq.insert(s);
    }
    std::vector<std::string> owned(uniq.begin(), uniq.end());
    std::shuffle(owned.begin(), owned.end(), rng);
    std::vector<std::string_view> toks(owned.begin(), owned.end());
    ASSERT_TRUE(same(token_splits(toks, SIZE_MAX, "t"), direct_splits(toks))) << "round " << round;
  }
}

TEST(TokenSplits, RefusesMoreCutsThanTheCap) {
  std::vector<std::string> owned;
  for (size_t k = 1; k <= 40; ++k) owned.push_back(std::string(k, 'a'));  // 780 cuts
  std::vector<std::string_view> toks(owned.begin(), owned.end());
  EXPECT_EQ(token_splits(toks, 780, "t").size(), 780u);
  EXPECT_THROW(token_splits(toks, 779, "t"), Error);
}

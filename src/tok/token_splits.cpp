// Cutting tokens into two tokens (see token_splits.h). Looking up every prefix and suffix of every
// token in a hash map costs the square of a token's length; instead, the tokens that are proper
// prefixes of a token are read off a stack while walking the tokens in sorted order, and the
// proper suffixes the same way over the reversed tokens. A cut at k is then a prefix of length k
// whose complement is a suffix: a merge of the two lists.
#include "tok/token_splits.h"

#include <algorithm>
#include <string>

#include "core/common.h"

namespace clm {

namespace {

// For each token, the tokens that are proper prefixes of it, by increasing length, as a flat list
// with offsets (token i owns of[off[i] .. off[i+1])).
struct PrefixLists {
  std::vector<uint32_t> off, of;
};

size_t common_prefix(std::string_view a, std::string_view b) {
  size_t n = std::min(a.size(), b.size()), i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// In sorted order, the tokens between a token p and any token it prefixes all start with p, so a
// stack of the tokens that prefix the previous one keeps exactly those whose length is at most the
// common prefix with the next one.
PrefixLists proper_prefixes(const std::vector<std::string_view>& toks) {
  const size_t n = toks.size();
  std::vector<uint32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = uint32_t(i);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return toks[a] < toks[b]; });
  std::vector<uint32_t> count(n + 1, 0), stack;
  std::vector<uint32_t> start(n);  // where each token's list begins in `flat` (sorted order)
  std::vector<uint32_t> flat;
  for (size_t s = 0; s < n; ++s) {
    const uint32_t cur = order[s];
    const size_t lcp = s ? common_prefix(toks[order[s - 1]], toks[cur]) : 0;
    while (!stack.empty() && toks[stack.back()].size() > lcp) stack.pop_back();
    start[cur] = uint32_t(flat.size());
    count[cur] = uint32_t(stack.size());
    flat.insert(flat.end(), stack.begin(), stack.end());
    stack.push_back(cur);
  }
  PrefixLists r;
  r.off.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) r.off[i + 1] = r.off[i] + count[i];
  r.of.resize(flat.size());
  for (size_t i = 0; i < n; ++i) std::copy_n(flat.begin() + start[i], count[i], r.of.begin() + r.off[i]);
  return r;
}

}  // namespace

std::vector<TokenSplit> token_splits(const std::vector<std::string_view>& toks, size_t max_splits,
                                     const std::string& what) {
  const size_t n = toks.size();
  size_t total = 0;
  for (auto t : toks) total += t.size();
  if (total > UINT32_MAX) fail("{}: the tokens hold more than {} bytes in all", what, UINT32_MAX);
  PrefixLists pre = proper_prefixes(toks);
  // Suffixes are prefixes of the reversed tokens.
  std::string rev;
  rev.reserve(total);
  for (auto t : toks) rev.append(t.rbegin(), t.rend());
  std::vector<std::string_view> rtoks(n);
  for (size_t i = 0, at = 0; i < n; at += toks[i].size(), ++i) rtoks[i] = std::string_view(rev).substr(at, toks[i].size());
  PrefixLists suf = proper_prefixes(rtoks);
  rev.clear();
  rev.shrink_to_fit();
  // Prefixes come by increasing length k, suffixes by increasing length m: walking the suffixes
  // from the longest meets the lengths size - k in step.
  std::vector<TokenSplit> out;
  for (size_t i = 0; i < n; ++i) {
    const size_t len = toks[i].size();
    uint32_t q = suf.off[i + 1];
    for (uint32_t p = pre.off[i]; p < pre.off[i + 1]; ++p) {
      const uint32_t left = pre.of[p];
      const size_t want = len - toks[left].size();
      while (q > suf.off[i] && toks[suf.of[q - 1]].size() > want) --q;
      if (q > suf.off[i] && toks[suf.of[q - 1]].size() == want) {
        if (out.size() >= max_splits)
          fail("{}: the tokens split into more than {} pairs of tokens (merges)", what, max_splits);
        out.push_back({uint32_t(i), left, suf.of[q - 1]});
      }
    }
  }
  return out;
}

}  // namespace clm

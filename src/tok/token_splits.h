// Every way to cut each token of a vocabulary into two tokens, found in time near-linear in the
// vocabulary's total size (sorting plus one pass each way), so that a vocabulary of long tokens
// loads as fast as one of short ones. Used to turn tiktoken ranks into BPE merges.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace clm {

// The cuts of token t at k (0 < k < size): toks[left] == t[0, k) and toks[right] == t[k, size).
struct TokenSplit {
  uint32_t token, left, right;
};

// All cuts of all tokens, grouped by token in input order and by increasing k within a token.
// `toks` must be distinct and non-empty. Fails (naming `what`) if there are more than max_splits.
std::vector<TokenSplit> token_splits(const std::vector<std::string_view>& toks, size_t max_splits,
                                     const std::string& what);

}  // namespace clm

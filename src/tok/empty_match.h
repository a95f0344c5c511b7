// The one check that a pre-split pattern never matches the empty string, applied to the pattern of
// every tokenizer format (docs/TOKENIZER.md, "Limits").
#pragma once
#include <string>

#include "tok/bpe.h"

namespace clm {

// Throws Error naming `what` if the compiled pattern can match the empty string: PCRE2's lower
// bound on a match's length is 0, or the anchored pattern matches the empty string at some
// character of a probe text (a positive lookahead such as `(?=a)` has a non-zero bound but still
// matches nothing before an `a`).
void refuse_empty_matches(const PreSplitter& ps, const std::string& what);

}  // namespace clm

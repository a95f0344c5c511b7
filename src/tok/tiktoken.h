// tiktoken encodings: a .tiktoken rank file (base64 token, space, rank per line) with a named or
// given split pattern, and a pickled tiktoken Encoding (nanochat's tokenizer.pkl) read by a
// restricted reader that accepts only the few pickle opcodes such a file uses and never runs or
// imports anything. Both become clocklm's BPE engine with tiktoken's rules (docs/TOKENIZER.md).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tok/tokenizer.h"

namespace clm {

// The published split pattern of a named encoding (gpt2, r50k_base, p50k_base, cl100k_base,
// o200k_base) or clocklm's own (clocklm); nullptr for another name.
const char* tiktoken_pattern(const std::string& name);
// The published special tokens of a named encoding (none for clocklm or an unknown name).
std::vector<std::pair<std::string, uint32_t>> tiktoken_specials(const std::string& name);

// A .tiktoken rank file's text; `what` names it in errors. The pattern comes from opt.pattern or
// the file's name; the special tokens from opt.specials, else the named encoding's.
Tokenizer parse_tiktoken_ranks(std::string_view text, const std::string& what, const TokenizerOptions& opt = {});

// What a pickled tiktoken.core.Encoding holds (its __getstate__ dictionary).
struct PickledEncoding {
  std::string name, pat_str;
  std::vector<std::pair<std::string, uint32_t>> mergeable_ranks;  // token bytes, rank
  std::vector<std::pair<std::string, uint32_t>> special_tokens;   // name, id
};
// Reads the pickle; throws Error naming the first opcode, class or field outside what such a file
// holds.
PickledEncoding read_tiktoken_pickle(std::string_view bytes, const std::string& what);
// The tokenizer of a pickled Encoding.
Tokenizer parse_tiktoken_pickle(std::string_view bytes, const std::string& what, const TokenizerOptions& opt = {});

// The tokenizer of tiktoken ranks (token bytes -> rank = id), a split pattern and special tokens:
// every pair of tokens that spells a token is a merge ranked as that token, and a pre-split chunk
// that is a token encodes as it (tiktoken's rules).
Tokenizer tiktoken_tokenizer(const std::vector<std::pair<std::string, uint32_t>>& ranks, const std::string& pattern,
                             std::vector<std::pair<std::string, uint32_t>> specials, const TokenizerOptions& opt,
                             const std::string& what);

}  // namespace clm

// tiktoken rank files and the conversion of tiktoken ranks into clocklm's BPE engine (see
// tiktoken.h). The named encodings' patterns and special tokens are tiktoken's published ones.
#include "tok/tiktoken.h"

#include <algorithm>
#include <filesystem>
#include <unordered_map>

#include "core/common.h"
#include "tok/bpe.h"
#include "tok/file_limits.h"
#include "tok/token_splits.h"

namespace clm {

namespace {

constexpr const char* kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Standard base64 with padding, as tiktoken writes it; false on anything else.
bool base64_decode(std::string_view s, std::string& out) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out.clear();
  if (s.empty() || s.size() % 4) return false;
  for (size_t i = 0; i < s.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s[i + k];
      if (c == '=' && i + 4 == s.size() && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad || (v[k] = val(c)) < 0) return false;
    }
    uint32_t x = (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out += char(x >> 16);
    if (pad < 2) out += char((x >> 8) & 0xFF);
    if (pad < 1) out += char(x & 0xFF);
  }
  return true;
}

std::string pattern_of(const TokenizerOptions& opt, const std::string& what, std::string& name) {
  name = opt.pattern;
  if (name.empty()) name = std::filesystem::path(what).stem().string();
  if (const char* p = tiktoken_pattern(name)) return p;
  if (!opt.pattern.empty()) {
    name.clear();
    return opt.pattern;
  }
  fail("{}: a tiktoken rank file needs its split pattern: --pattern gpt2|r50k_base|p50k_base|cl100k_base|"
       "o200k_base|clocklm or --pattern REGEX", what);
}

}  // namespace

const char* tiktoken_pattern(const std::string& name) {
  if (name == "gpt2" || name == "r50k_base" || name == "p50k_base") return kGpt2Pattern;
  if (name == "cl100k_base") return kCl100kPattern;
  if (name == "o200k_base") return kO200kPattern;
  if (name == "clocklm") return kGpt4Pattern;
  return nullptr;
}

std::vector<std::pair<std::string, uint32_t>> tiktoken_specials(const std::string& name) {
  if (name == "gpt2" || name == "r50k_base" || name == "p50k_base") return {{"<|endoftext|>", 50256}};
  if (name == "cl100k_base")
    return {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258}, {"<|fim_middle|>", 100259},
            {"<|fim_suffix|>", 100260}, {"<|endofprompt|>", 100276}};
  if (name == "o200k_base") return {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};
  return {};
}

Tokenizer tiktoken_tokenizer(const std::vector<std::pair<std::string, uint32_t>>& ranks, const std::string& pattern,
                             std::vector<std::pair<std::string, uint32_t>> specials, const TokenizerOptions& opt,
                             const std::string& what) {
  uint64_t vocab_size = 0;
  for (auto& [tok, r] : ranks) vocab_size = std::max<uint64_t>(vocab_size, uint64_t(r) + 1);
  for (auto& [name, id] : specials) vocab_size = std::max<uint64_t>(vocab_size, uint64_t(id) + 1);
  if (vocab_size > kMaxVocab) fail("{}: ids up to {} are too many (at most {})", what, vocab_size - 1, kMaxVocab);
  TokenizerParts p;
  p.kind = "tiktoken";
  p.pattern = pattern;
  p.ignore_merges = true;  // tiktoken looks a whole piece up before merging
  p.vocab_size = uint32_t(vocab_size);
  std::unordered_map<std::string_view, uint32_t> rank_of;
  rank_of.reserve(ranks.size());
  std::vector<uint8_t> defined(vocab_size, 0);
  for (auto& [tok, r] : ranks) {
    if (tok.empty()) fail("{}: rank {} is an empty token", what, r);
    check_token_size(tok.size(), what, fmt::format("rank {}", r));
    if (!rank_of.emplace(tok, r).second) fail("{}: a token is listed twice (rank {})", what, r);
    if (defined[r]) fail("{}: rank {} is given to two tokens", what, r);
    defined[r] = 1;
  }
  for (int b = 0; b < 256; ++b) {
    char c = char(b);
    auto jt = rank_of.find(std::string_view(&c, 1));
    if (jt == rank_of.end()) fail("{}: no token for the single byte {}", what, b);
    p.byte_id[b] = jt->second;
  }
  // Every split of a token into two tokens is a merge, ranked as the token; tokens no split makes
  // are reached only as whole pieces. Tokens go in rank order, so the merges do too.
  std::vector<const std::pair<std::string, uint32_t>*> order;
  order.reserve(ranks.size());
  for (auto& e : ranks) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->second < b->second; });
  std::vector<std::string_view> toks(order.size());
  for (size_t i = 0; i < order.size(); ++i) toks[i] = order[i]->first;
  std::vector<TokenSplit> splits = token_splits(toks, kMaxTiktokenMerges, what);
  p.merges.reserve(splits.size());
  p.merge_rank.reserve(splits.size());
  std::vector<uint8_t> made(order.size(), 0);
  for (const TokenSplit& s : splits) {
    p.merges.push_back({order[s.left]->second, order[s.right]->second, order[s.token]->second});
    p.merge_rank.push_back(order[s.token]->second);
    made[s.token] = 1;
  }
  for (size_t i = 0; i < order.size(); ++i)
    if (!made[i] && order[i]->first.size() >= 2) p.tokens.emplace_back(order[i]->second, order[i]->first);
  for (auto& [name, id] : specials) {
    if (defined[id]) fail("{}: special token {} has id {}, which is a token", what, name, id);
    defined[id] = 1;
  }
  p.specials = std::move(specials);
  fill_unused_ids(p, defined, what);
  choose_bos(p, opt, "", what);
  return build_tokenizer(std::move(p), what);
}

Tokenizer parse_tiktoken_ranks(std::string_view text, const std::string& what, const TokenizerOptions& opt) {
  check_tokenizer_size(text.size(), what);
  std::string name;
  std::string pattern = pattern_of(opt, what, name);
  std::vector<std::pair<std::string, uint32_t>> ranks;
  size_t pos = 0, line_no = 0;
  std::string tok;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
      fail("{} line {}: expected a base64 token, a space and a rank", what, line_no);
    // Checked before decoding (up to two bytes of padding) and exactly after.
    if (sp / 4 * 3 > kMaxTokenBytes + 2) check_token_size(sp / 4 * 3, what, fmt::format("line {}", line_no));
    if (!base64_decode(line.substr(0, sp), tok)) fail("{} line {}: bad base64 token", what, line_no);
    check_token_size(tok.size(), what, fmt::format("line {}", line_no));
    std::string_view digits = line.substr(sp + 1);
    uint64_t r = 0;
    if (digits.empty() || digits.size() > 9) fail("{} line {}: bad rank", what, line_no);
    for (char c : digits) {
      if (c < '0' || c > '9') fail("{} line {}: bad rank", what, line_no);
      r = r * 10 + uint64_t(c - '0');
    }
    if (r >= kMaxVocab) fail("{} line {}: rank {} is too large", what, line_no, r);
    ranks.emplace_back(tok, uint32_t(r));
  }
  if (ranks.empty()) fail("{}: no tokens", what);
  auto specials = opt.specials.empty() ? tiktoken_specials(name) : opt.specials;
  return tiktoken_tokenizer(ranks, pattern, std::move(specials), opt, what);
}

Tokenizer parse_tiktoken_pickle(std::string_view bytes, const std::string& what, const TokenizerOptions& opt) {
  PickledEncoding e = read_tiktoken_pickle(bytes, what);
  if (e.mergeable_ranks.empty()) fail("{}: the Encoding has no mergeable_ranks", what);
  return tiktoken_tokenizer(e.mergeable_ranks, e.pat_str, std::move(e.special_tokens), opt, what);
}

}  // namespace clm

// The fast encoder must equal a slow, obviously-correct reference BPE written here, on > 1 MB of
// varied text: for a trained tokenizer (reading its saved merges) and for GPT-2 (working on GPT-2's
// unicode token strings straight from encoder.json / vocab.bpe, as GPT-2's encoder.py does).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <map>
#include <unordered_map>
#include <nlohmann/json.hpp>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "test_tok_util.h"
#include "tok/tokenizer.h"
#include "tok/train.h"

using namespace clm;
using namespace tok_test;
namespace fs = std::filesystem;

namespace {

// Length of the UTF-8 character at s[i], or 0 if the bytes there are not valid UTF-8: decode the
// code point and reject overlongs, surrogates and values above U+10FFFF.
size_t ref_utf8_len(const std::string& s, size_t i) {
  unsigned char c = s[i];
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  else if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    unsigned char d = s[i + k];
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return n;
}

// findall() of the pattern over valid UTF-8 runs (interpreter, unanchored); invalid-byte runs are
// chunks of their own.
// \s means Unicode White_Space (PCRE2's own \s also matches U+180E), spelled out in the two
// built-in patterns, which hold no escaped backslash.
std::vector<std::string> ref_split(const std::string& pattern_in, const std::string& text) {
  std::string pattern;
  for (size_t i = 0; i < pattern_in.size(); ++i) {
    if (pattern_in[i] == '\\' && i + 1 < pattern_in.size() && (pattern_in[i + 1] == 's' || pattern_in[i + 1] == 'S')) {
      pattern += pattern_in[i + 1] == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
      ++i;
    } else {
      pattern += pattern_in[i];
    }
  }
  int err;
  PCRE2_SIZE off;
  pcre2_code* re = pcre2_compile((PCRE2_SPTR)pattern.c_str(), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  EXPECT_NE(re, nullptr);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  std::vector<std::string> out;
  auto findall = [&](const std::string& seg) {
    size_t pos = 0;
    while (pos < seg.size()) {
      // The whole segment is checked for valid UTF-8 on the first call only (the check scans the
      // whole subject, which would make this quadratic).
      int rc = pcre2_match(re, (PCRE2_SPTR)seg.data(), seg.size(), pos, pos ? PCRE2_NO_UTF_CHECK : 0, md, nullptr);
      ASSERT_GT(rc, 0) << "no match";
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      ASSERT_EQ(ov[0], pos) << "the pattern skipped text";
      ASSERT_GT(ov[1], ov[0]);
      out.push_back(seg.substr(ov[0], ov[1] - ov[0]));
      pos = ov[1];
    }
  };
  size_t i = 0;
  std::string valid, bad;
  while (i < text.size()) {
    size_t n = ref_utf8_len(text, i);
    if (n) {
      if (!bad.empty()) out.push_back(bad), bad.clear();
      valid.append(text, i, n);
      i += n;
    } else {
      if (!valid.empty()) findall(valid), valid.clear();
      bad += text[i++];
    }
  }
  if (!bad.empty()) out.push_back(bad);
  if (!valid.empty()) findall(valid);
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  return out;
}

// BPE on a list of symbols: find the adjacent pair with the lowest rank, merge every occurrence
// left to right, repeat until no adjacent pair has a rank.
template <class Sym, class RankFn, class MergeFn>
std::vector<Sym> ref_bpe(std::vector<Sym> word, RankFn rank_of, MergeFn merged) {
  while (word.size() > 1) {
    long best = -1;
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      long r = rank_of(word[i], word[i + 1]);
      if (r >= 0 && (best < 0 || r < best)) best = r, best_i = i;
    }
    if (best < 0) break;
    Sym a = word[best_i], b = word[best_i + 1];
    std::vector<Sym> next;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
        next.push_back(merged(a, b));
        i += 2;
      } else {
        next.push_back(word[i++]);
      }
    }
    word = next;
  }
  return word;
}

std::string reference_text(bool with_invalid) {
  std::string s = shakespeare();
  s += varied_text((with_invalid ? 400000 : 600000) + (s.empty() ? 1'100'000 : 0), 1234);
  if (with_invalid) {
    std::string r = random_bytes(200000, 99);
    for (size_t i = 0; i < r.size(); i += 1000) {
      s += r.substr(i, 1000);
      s += " word ";
      for (auto& c : invalid_utf8_cases()) s += c;
    }
  }
  return s;
}

}  // namespace

TEST(TokReference, TrainedEqualsReference) {
  // Train on some of the text, then compare on all of it (so unseen strings appear too).
  std::string text = reference_text(true);
  ASSERT_GE(text.size(), 1'000'000u);
  BpeTrainOptions opt;
  opt.vocab_size = 4096;
  Tokenizer t = train_bpe({std::string_view(text).substr(0, 400000), std::string_view(text).substr(text.size() - 300000)}, opt);
  auto dir = tok_test::temp_dir("clocklm_test_tok_ref");
  fs::create_directories(dir);
  t.save((dir / "t.json").string());
  auto j = nlohmann::json::parse(read_file((dir / "t.json").string()));
  fs::remove_all(dir);
  std::map<std::pair<uint32_t, uint32_t>, std::pair<long, uint32_t>> ranks;
  for (size_t r = 0; r < j["merges"].size(); ++r) {
    auto& m = j["merges"][r];
    ranks[{m[0].get<uint32_t>(), m[1].get<uint32_t>()}] = {long(r), m[2].get<uint32_t>()};
  }
  std::vector<uint32_t> byte_ids = j["byte_ids"].get<std::vector<uint32_t>>();
  std::vector<uint32_t> want;
  std::unordered_map<std::string, std::vector<uint32_t>> memo;
  for (const std::string& chunk : ref_split(j["pattern"].get<std::string>(), text)) {
    auto it = memo.find(chunk);
    if (it == memo.end()) {
      std::vector<uint32_t> w;
      for (unsigned char c : chunk) w.push_back(byte_ids[c]);
      auto rank_of = [&](uint32_t a, uint32_t b) {
        auto f = ranks.find({a, b});
        return f == ranks.end() ? -1L : f->second.first;
      };
      auto merged = [&](uint32_t a, uint32_t b) { return ranks.at({a, b}).second; };
      it = memo.emplace(chunk, ref_bpe(w, rank_of, merged)).first;
    }
    want.insert(want.end(), it->second.begin(), it->second.end());
  }
  auto got = t.encode(text);
  ASSERT_EQ(got.size(), want.size());
  size_t first_diff = 0;
  while (first_diff < got.size() && got[first_diff] == want[first_diff]) ++first_diff;
  EXPECT_EQ(first_diff, got.size()) << "first difference at token " << first_diff;
  EXPECT_EQ(t.decode(got), text);
}

TEST(TokReference, Gpt2EqualsReference) {
  if (!have_gpt2()) GTEST_SKIP() << "no GPT-2 files under " << gpt2_dir();
  std::string text = reference_text(false);
  ASSERT_GE(text.size(), 1'000'000u);
  // GPT-2's byte -> unicode table, built as in its encoder.py.
  std::vector<int> bs, cs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  cs = bs;
  for (int b = 0, n = 0; b < 256; ++b)
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) bs.push_back(b), cs.push_back(256 + n++);
  std::string byte_enc[256];
  for (size_t k = 0; k < bs.size(); ++k) {
    int c = cs[k];
    std::string u;
    if (c < 0x80) u = std::string(1, char(c));
    else u = {char(0xC0 | (c >> 6)), char(0x80 | (c & 0x3F))};
    byte_enc[bs[k]] = u;
  }
  auto enc = nlohmann::json::parse(read_file(gpt2_dir() + "/encoder.json"));
  std::map<std::pair<std::string, std::string>, long> ranks;
  {
    std::string bpe = read_file(gpt2_dir() + "/vocab.bpe");
    std::istringstream in(bpe);
    std::string line;
    std::getline(in, line);  // #version
    long r = 0;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      size_t sp = line.find(' ');
      ranks[{line.substr(0, sp), line.substr(sp + 1)}] = r++;
    }
  }
  const std::string pat = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  std::vector<uint32_t> want;
  std::unordered_map<std::string, std::vector<uint32_t>> memo;
  for (const std::string& chunk : ref_split(pat, text)) {
    auto it = memo.find(chunk);
    if (it == memo.end()) {
      std::vector<std::string> w;
      for (unsigned char c : chunk) w.push_back(byte_enc[c]);
      auto rank_of = [&](const std::string& a, const std::string& b) {
        auto f = ranks.find({a, b});
        return f == ranks.end() ? -1L : f->second;
      };
      auto merged = [](const std::string& a, const std::string& b) { return a + b; };
      std::vector<uint32_t> ids;
      for (auto& tokstr : ref_bpe(w, rank_of, merged)) ids.push_back(enc.at(tokstr).get<uint32_t>());
      it = memo.emplace(chunk, ids).first;
    }
    want.insert(want.end(), it->second.begin(), it->second.end());
  }
  Tokenizer t = Tokenizer::load(gpt2_dir());
  auto got = t.encode(text);
  ASSERT_EQ(got.size(), want.size());
  size_t first_diff = 0;
  while (first_diff < got.size() && got[first_diff] == want[first_diff]) ++first_diff;
  EXPECT_EQ(first_diff, got.size()) << "first difference at token " << first_diff;
}

// Refusing pre-split patterns that can match the empty string (see empty_match.h). Such a match
// would make an empty chunk, which the other libraries treat each in its own way, so a tokenizer
// with one cannot encode as its own library does.
#include "tok/empty_match.h"

#include "core/common.h"

namespace clm {

namespace {

// Text to probe a pattern on: every ASCII character in order and in reverse (so each sits between
// different neighbours), common English shapes, and letters, digits, marks, spaces and symbols of
// other scripts, so that a lookahead or lookbehind on a common character finds its context.
std::string probe_text() {
  std::string s;
  for (int c = 1; c < 128; ++c) s += char(c);
  for (int c = 127; c >= 1; --c) s += char(c);
  s += "The quick brown fox's 'll 're 've I'm don't -- 12 345 6789 3.14 a,b a.b a_b aa bb  \t\r\n\n  x\n";
  s += "\xC3\xA9t\xC3\xA9 \xC3\x9F \xCE\xA9\xCE\xB1 \xD0\x96\xD0\xB6 \xE4\xB8\xAD\xE6\x96\x87 \xE6\x97\xA5\xE6\x9C\xAC "
       "\xED\x95\x9C \xD9\xA1\xD9\xA2 \xD8\xB9\xD8\xB1\xD8\xA8 \xE0\xA4\xB9\xE0\xA4\xBF "
       "\xF0\x9F\x99\x82\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xC2\xA0\xE2\x80\xA8\xC2\x85\xE3\x80\x80 "
       "e\xCC\x81 \xE2\x80\x8B\xEF\xBB\xBF \xC2\xBD\xE2\x85\xAB \xC7\x85 \xE2\x82\xAC$ \xE2\x80\x94\n";
  return s;
}

}  // namespace

void refuse_empty_matches(const PreSplitter& ps, const std::string& what) {
  auto refuse = [&] {
    fail("{}: the split pattern can match the empty string, which is not supported (every pre-split chunk "
         "must hold at least one character)", what);
  };
  if (ps.min_length == 0) refuse();
  static const std::string probe = probe_text();
  SplitScratch sc(ps);
  const auto* subj = reinterpret_cast<const uint8_t*>(probe.data());
  const size_t n = probe.size();
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(sc.md);
  for (size_t pos = 0; pos < n;) {
    int rc = ps.jit ? pcre2_jit_match(ps.code, subj, n, pos, 0, sc.md, sc.mctx)
                    : pcre2_match(ps.code, subj, n, pos, PCRE2_NO_UTF_CHECK, sc.md, sc.mctx);
    if (rc > 0 && ov[1] == ov[0]) refuse();
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) split_error(rc);
    const int l = utf8_seq_len(subj + pos, n - pos);
    pos += size_t(l ? l : 1);
  }
}

}  // namespace clm

// Pre-splitting text into chunks before BPE: compiling the PCRE2 regex (UTF + Unicode properties,
// JIT), per-thread match scratch, and safe cut points for processing one large text in pieces.
#include "core/common.h"
#include "tok/bpe.h"

namespace clm {

static std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

std::string pcre2_pattern_of(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c != '\\' || i + 1 >= pattern.size()) {
      out += c;
      continue;
    }
    char e = pattern[++i];
    if (e == 's') {
      out += "\\p{White_Space}";
    } else if (e == 'S') {
      out += "\\P{White_Space}";
    } else if (e == 'Q') {  // \Q...\E quotes text literally: copy it as it is
      size_t end = pattern.find("\\E", i + 1);
      end = end == std::string::npos ? pattern.size() : end + 2;
      out += '\\';
      out.append(pattern, i, end - i);
      i = end - 1;
    } else {
      out += c;
      out += e;
    }
  }
  return out;
}

PreSplitter::PreSplitter(const std::string& pattern, bool allow_fast_path) {
  int err = 0;
  PCRE2_SIZE off = 0;
  // UTF: the subject is UTF-8 (we only pass valid runs, see pre_split). UCP: \d, \w and the POSIX
  // classes use Unicode properties. ANCHORED: every match starts where the previous ended.
  const std::string compiled = pcre2_pattern_of(pattern);
  code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                       PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &off, nullptr);
  if (!code) fail("invalid pre-split pattern at offset {}: {}", off, pcre2_message(err));
  search = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(), PCRE2_UTF | PCRE2_UCP,
                         &err, &off, nullptr);
  if (!search) {
    pcre2_code_free(code);
    fail("invalid pre-split pattern at offset {}: {}", off, pcre2_message(err));
  }
  jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  search_jit = pcre2_jit_compile(search, PCRE2_JIT_COMPLETE) == 0;
  uint32_t minlen = 0;
  if (pcre2_pattern_info(code, PCRE2_INFO_MINLENGTH, &minlen) == 0) min_length = minlen;
  newline_cuttable = pattern == kGpt4Pattern || pattern == kGpt2Pattern;
  if (allow_fast_path) fast = pattern == kGpt4Pattern ? 1 : pattern == kGpt2Pattern ? 2 : 0;
}

PreSplitter::~PreSplitter() {
  pcre2_code_free(code);
  pcre2_code_free(search);
}

SplitScratch::SplitScratch(const PreSplitter& p) : ps(p) {
  md = pcre2_match_data_create_from_pattern(ps.code, nullptr);
  mctx = pcre2_match_context_create(nullptr);
  if (!md || !mctx) fail("out of memory creating regex match data");
  if (ps.jit) {
    // Long runs (e.g. megabytes of spaces) need more than the default 32 KiB JIT stack.
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (!stack) fail("out of memory creating the regex JIT stack");
    pcre2_jit_stack_assign(mctx, nullptr, stack);
  }
}

SplitScratch::~SplitScratch() {
  if (stack) pcre2_jit_stack_free(stack);
  pcre2_match_context_free(mctx);
  pcre2_match_data_free(md);
}

void split_error(int rc) { fail("pre-split regex failed: {}", pcre2_message(rc)); }

size_t next_match_start(SplitScratch& sc, const uint8_t* subj, size_t n, size_t pos) {
  const PreSplitter& ps = sc.ps;
  int rc = ps.search_jit ? pcre2_jit_match(ps.search, subj, n, pos, 0, sc.md, sc.mctx)
                         : pcre2_match(ps.search, subj, n, pos, PCRE2_NO_UTF_CHECK, sc.md, sc.mctx);
  if (rc == PCRE2_ERROR_NOMATCH) return n;
  if (rc < 0) split_error(rc);
  return pcre2_get_ovector_pointer(sc.md)[0];
}

std::vector<size_t> cut_points(std::string_view text, size_t target) {
  std::vector<size_t> cuts{0};
  if (target == 0) target = 1;
  size_t pos = target;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    // Cut after a lone '\n' between two printable non-space ASCII bytes: with the built-in patterns
    // no chunk spans such a point and the '\n' is a chunk ending there either way (GPT-2's
    // `\s+(?!\S)` would treat a longer whitespace run before the cut differently), and no UTF-8
    // sequence or invalid-byte run can span it either.
    auto printable = [](char ch) {
      unsigned char c = static_cast<unsigned char>(ch);
      return c > 0x20 && c < 0x7F;
    };
    while (nl != std::string_view::npos && nl + 1 < text.size()) {
      if (nl > 0 && printable(text[nl - 1]) && printable(text[nl + 1])) break;
      nl = text.find('\n', nl + 1);
    }
    if (nl == std::string_view::npos || nl + 1 >= text.size()) break;
    cuts.push_back(nl + 1);
    pos = nl + 1 + target;
  }
  cuts.push_back(text.size());
  return cuts;
}

}  // namespace clm

// Internals of the byte-level BPE shared by the encoder (tokenizer.cpp), the loaders of other
// formats (gpt2.cpp, hf_read.cpp, tiktoken.cpp) and the trainer (train.cpp): the pre-split
// regexes, a flat pair->rank hash map, the definition of TokenizerImpl and a tiny parallel-for.
// Not part of the public interface.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tok/tokenizer.h"

namespace clm {

// GPT-4 style pre-split (as in nanochat: numbers in groups of 1-2 digits). Contractions,
// letter runs with one optional leading non-letter, digit pairs, punctuation runs (with trailing
// newlines), newline runs, and whitespace that leaves its last space to the following word.
inline constexpr const char* kGpt4Pattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
// GPT-2's own pre-split pattern (from its encoder.py).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Length of the valid UTF-8 sequence starting at s[0] (1-4), or 0 if s[0] does not start one
// (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF) -- the same rule PCRE2 uses.
inline int utf8_seq_len(const uint8_t* s, size_t n) {
  uint8_t c = s[0];
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  if (c < 0xE0) return (n >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
  if (c < 0xF0) {
    if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0;  // overlong
    if (c == 0xED && s[1] >= 0xA0) return 0; // surrogate
    return 3;
  }
  if (c < 0xF5) {
    if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
    if (c == 0xF0 && s[1] < 0x90) return 0;  // overlong
    if (c == 0xF4 && s[1] >= 0x90) return 0; // above U+10FFFF
    return 4;
  }
  return 0;
}

// The pattern as PCRE2 compiles it: `\s` and `\S` become \p{White_Space} and \P{White_Space}, the
// definition of Rust's regex, Oniguruma, JavaScript's \p{White_Space} and Python's `regex` (PCRE2's
// own \s also matches U+180E).
std::string pcre2_pattern_of(const std::string& pattern);

inline bool valid_utf8(std::string_view s) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    int l = utf8_seq_len(p + i, s.size() - i);
    if (!l) return false;
    i += size_t(l);
  }
  return true;
}

// The compiled pre-split regex (PCRE2, UTF + UCP, anchored, JIT-compiled), plus an unanchored copy
// that finds the next match where the anchored one fails. Immutable and shared by all threads;
// each thread brings its own SplitScratch.
struct PreSplitter {
  explicit PreSplitter(const std::string& pattern, bool allow_fast_path = true);
  ~PreSplitter();
  PreSplitter(const PreSplitter&) = delete;
  PreSplitter& operator=(const PreSplitter&) = delete;

  pcre2_code* code = nullptr;
  pcre2_code* search = nullptr;  // unanchored
  bool jit = false, search_jit = false;
  size_t min_length = 0;         // PCRE2's lower bound on a match's length (0: may match empty)
  // True for the two built-in patterns: no match ever continues past a '\n' into a following
  // printable ASCII character, so text may be cut right there and split/encoded piecewise with an
  // identical result (used to parallelise one large document).
  bool newline_cuttable = false;
  // ASCII fast path: 0 none, 1 GPT-4 pattern, 2 GPT-2 pattern (see fast_gpt4 / fast_gpt2).
  int fast = 0;
};

struct SplitScratch {
  explicit SplitScratch(const PreSplitter& ps);
  ~SplitScratch();
  SplitScratch(const SplitScratch&) = delete;
  SplitScratch& operator=(const SplitScratch&) = delete;
  const PreSplitter& ps;
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
};

// ASCII fast paths for the two built-in patterns. They return the end of the regex match that
// starts at s[i] when every byte the match depends on is ASCII (the classes are then unambiguous:
// letters [A-Za-z], digits [0-9], \s = [\t\n\v\f\r ]), and 0 when a non-ASCII byte is involved,
// in which case PCRE2 decides. s[0..n) is the whole subject (its end counts as end of subject).
// Tested against PCRE2 alone on random strings (tests/test_tok.cpp, PreSplitFastPathEqualsPcre2).
enum : uint8_t { kP = 0, kL = 1, kN = 2, kW = 3 /* \t \v \f space */, kR = 4 /* \r \n */, kU = 5 /* >= 0x80 */, kEnd = 6 };
struct AsciiClasses {
  uint8_t c[256];
  constexpr AsciiClasses() : c() {
    for (int b = 0; b < 256; ++b) {
      uint8_t k = kP;
      if (b >= 0x80) k = kU;
      else if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')) k = kL;
      else if (b >= '0' && b <= '9') k = kN;
      else if (b == '\r' || b == '\n') k = kR;
      else if (b == ' ' || b == '\t' || b == '\v' || b == '\f') k = kW;
      c[b] = k;
    }
  }
};
inline constexpr AsciiClasses kAscii{};

// Whitespace run at i (classes kW/kR), then the whitespace alternatives: with `last_newline`
// (GPT-4's `\s*[\r\n]`) a run holding \r or \n ends after its last one; otherwise `\s+(?!\S)`
// leaves the run's last character to what follows, unless the run is a single character or ends
// the subject, and `\s+` takes the rest.
inline size_t fast_whitespace(const uint8_t* s, size_t n, size_t i, bool last_newline) {
  size_t k = i, nl = SIZE_MAX;
  for (; k < n; ++k) {
    uint8_t c = kAscii.c[s[k]];
    if (c == kW) continue;
    if (c == kR) { nl = k; continue; }
    if (c == kU) return 0;
    break;
  }
  if (last_newline && nl != SIZE_MAX) return nl + 1;
  if (k == n || k - i == 1) return k;
  return k - 1;
}

// Run of class `want` starting at j; 0 if it runs into a non-ASCII byte.
inline size_t fast_run(const uint8_t* s, size_t n, size_t j, uint8_t want) {
  for (; j < n; ++j) {
    uint8_t c = kAscii.c[s[j]];
    if (c == want) continue;
    if (c == kU) return 0;
    break;
  }
  return j;
}

// '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+
inline size_t fast_gpt4(const uint8_t* s, size_t n, size_t i) {
  auto C = [&](size_t k) -> uint8_t { return k < n ? kAscii.c[s[k]] : uint8_t(kEnd); };
  const uint8_t c0 = C(i);
  if (c0 == kU) return 0;
  if (s[i] == '\'') {  // contractions, case-insensitive (non-ASCII letters may fold to s/k: ask PCRE2)
    uint8_t c1 = C(i + 1);
    if (c1 == kU) return 0;
    if (c1 == kL) {
      char a = char(s[i + 1] | 0x20);
      if (a == 's' || a == 'd' || a == 'm' || a == 't') return i + 2;
      uint8_t c2 = C(i + 2);
      if (c2 == kU) return 0;
      if (c2 == kL) {
        char b = char(s[i + 2] | 0x20);
        if ((a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e')) return i + 3;
      }
    }
  }
  // [^\r\n\p{L}\p{N}]?+\p{L}+ : the optional prefix is possessive.
  size_t j = (c0 == kP || c0 == kW) ? i + 1 : i;
  uint8_t cj = C(j);
  if (cj == kU) return 0;
  if (cj == kL) return fast_run(s, n, j + 1, kL);
  // \p{N}{1,2}
  if (c0 == kN) {
    uint8_t c1 = C(i + 1);
    if (c1 == kU) return 0;
    return c1 == kN ? i + 2 : i + 1;
  }
  //  ?[^\s\p{L}\p{N}]++[\r\n]*
  j = s[i] == ' ' ? i + 1 : i;
  cj = C(j);
  if (cj == kU) return 0;
  if (cj == kP) {
    size_t k = fast_run(s, n, j + 1, kP);
    if (!k) return 0;
    while (k < n && kAscii.c[s[k]] == kR) ++k;
    return k;
  }
  return fast_whitespace(s, n, i, true);  // c0 is kW or kR here
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
inline size_t fast_gpt2(const uint8_t* s, size_t n, size_t i) {
  const uint8_t c0 = kAscii.c[s[i]];
  if (c0 == kU) return 0;
  if (s[i] == '\'' && i + 1 < n) {  // contractions, case-sensitive
    char a = char(s[i + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      char b = char(s[i + 2]);
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  size_t j = s[i] == ' ' ? i + 1 : i;
  uint8_t cj = j < n ? kAscii.c[s[j]] : uint8_t(kEnd);
  if (cj == kU) return 0;
  if (cj == kL || cj == kN || cj == kP) return fast_run(s, n, j + 1, cj);
  return fast_whitespace(s, n, i, false);  // c0 is kW or kR here
}

[[noreturn]] void split_error(int rc);

// End of the text the pattern does not match from `pos` on: the start of the next match (found by
// the unanchored regex) or the end of the subject.
size_t next_match_start(SplitScratch& sc, const uint8_t* subj, size_t n, size_t pos);

// Match the regex over one piece of valid UTF-8, calling fn(chunk) for consecutive chunks. Text
// before the next match, where the pattern does not match, is a chunk of its own (as Hugging
// Face's Split does); where it matches only the empty string, one character is. So the chunks
// always cover the text.
template <class F>
void split_valid(SplitScratch& sc, std::string_view text, F&& fn) {
  const PCRE2_SPTR subj = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(sc.md);
  const int fast = sc.ps.fast;
  size_t pos = 0;
  while (pos < n) {
    size_t f = fast == 1 ? fast_gpt4(subj, n, pos) : fast == 2 ? fast_gpt2(subj, n, pos) : 0;
    if (f) {
      fn(text.substr(pos, f - pos));
      pos = f;
      continue;
    }
    int rc = sc.ps.jit ? pcre2_jit_match(sc.ps.code, subj, n, pos, 0, sc.md, sc.mctx)
                       : pcre2_match(sc.ps.code, subj, n, pos, PCRE2_NO_UTF_CHECK, sc.md, sc.mctx);
    size_t end = pos;
    if (rc > 0) end = ov[1];
    else if (rc != PCRE2_ERROR_NOMATCH) split_error(rc);
    else end = next_match_start(sc, subj, n, pos);
    if (end <= pos) {
      int l = utf8_seq_len(subj + pos, n - pos);
      end = pos + size_t(l ? l : 1);
    }
    fn(text.substr(pos, end - pos));
    pos = end;
  }
}

// Split any bytes into pre-split chunks whose concatenation is exactly `text`. Valid UTF-8 runs go
// through the regex; each maximal run of invalid bytes becomes a chunk of its own.
template <class F>
void pre_split(SplitScratch& sc, std::string_view text, F&& fn) {
  const uint8_t* s = reinterpret_cast<const uint8_t*>(text.data());
  size_t n = text.size(), i = 0;
  while (i < n) {
    size_t start = i;
    while (i < n) {  // extend the valid run
      if (s[i] < 0x80) { ++i; continue; }
      int l = utf8_seq_len(s + i, n - i);
      if (!l) break;
      i += size_t(l);
    }
    if (i > start) split_valid(sc, text.substr(start, i - start), fn);
    size_t bad = i;
    while (i < n && s[i] >= 0x80 && !utf8_seq_len(s + i, n - i)) ++i;
    if (i > bad) fn(text.substr(bad, i - bad));
  }
}

// Cut points for piecewise processing of a large text: offsets just after a '\n' that is followed
// by a printable non-space ASCII byte, about `target` bytes apart. Always starts with 0 and ends
// with text.size().
std::vector<size_t> cut_points(std::string_view text, size_t target);

// Open-addressing hash map from a (left, right) id pair to a 64-bit value. Keys are never erased.
struct PairMap {
  static constexpr uint64_t kEmpty = ~0ull;
  std::vector<uint64_t> keys, vals;
  size_t mask = 0, count = 0;

  static uint64_t key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }
  static size_t slot_of(uint64_t k) { return size_t((k * 0x9E3779B97F4A7C15ULL) >> 20); }
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    if (cap <= keys.size()) return;
    std::vector<uint64_t> ok = std::move(keys), ov = std::move(vals);
    keys.assign(cap, kEmpty);
    vals.assign(cap, 0);
    mask = cap - 1;
    count = 0;
    for (size_t i = 0; i < ok.size(); ++i)
      if (ok[i] != kEmpty) insert(ok[i], ov[i]);
  }
  // Pointer to the value for k, or nullptr.
  const uint64_t* find(uint64_t k) const {
    if (keys.empty()) return nullptr;
    for (size_t i = slot_of(k) & mask;; i = (i + 1) & mask) {
      if (keys[i] == k) return &vals[i];
      if (keys[i] == kEmpty) return nullptr;
    }
  }
  // Insert or overwrite.
  uint64_t& insert(uint64_t k, uint64_t v) {
    if ((count + 1) * 2 > keys.size()) reserve(count + 1 > 8 ? count + 1 : 8);
    for (size_t i = slot_of(k) & mask;; i = (i + 1) & mask) {
      if (keys[i] == k) { vals[i] = v; return vals[i]; }
      if (keys[i] == kEmpty) {
        keys[i] = k;
        vals[i] = v;
        ++count;
        return vals[i];
      }
    }
  }
};

// Everything that defines a tokenizer; build_tokenizer derives the rest.
struct TokenizerParts {
  std::string pattern;
  uint32_t byte_id[256] = {};                   // id of each single byte
  std::vector<std::array<uint32_t, 3>> merges;  // in rank order: {left, right, new id}
  // Rank of each merge where it is not its index (tiktoken: the rank of the merged token, shared
  // by every pair that spells it); empty: merge r has rank r. Non-decreasing.
  std::vector<uint32_t> merge_rank;
  std::vector<std::pair<std::string, uint32_t>> specials;  // name, id
  // Ids that are neither a byte, a merge result nor special: tokens of the vocabulary that the
  // merges never build (reachable only through ignore_merges). Id and bytes.
  std::vector<std::pair<uint32_t, std::string>> tokens;
  bool ignore_merges = false;  // a pre-split chunk that is itself a token encodes as that token
  uint32_t bos = 0;
  uint32_t vocab_size = 0;
  // "bpe" (trained by clocklm), "gpt2" (GPT-2's files), "hf" (tokenizer.json), "tiktoken". The
  // first two are checked strictly: every id is defined once, and a merge uses only ids defined
  // before it. The others may define a token by several merges, rank merges out of order and
  // hold tokens no merge builds, as those formats allow.
  std::string kind = "bpe";
};

// Bytes -> id of the non-special tokens, for ignore_merges (open addressing over ids).
struct WholeTokenMap {
  std::vector<uint32_t> slots;  // id + 1; 0: empty
  size_t mask = 0;
  void build(const std::vector<std::string>& vocab, const std::vector<uint8_t>& special);
  // Sets id to the token whose bytes are exactly s; false if there is none.
  bool find(std::string_view s, const std::vector<std::string>& vocab, uint32_t& id) const;
};

struct TokenizerImpl {
  std::string pattern;
  std::unique_ptr<PreSplitter> splitter;
  uint32_t byte_id[256];                 // id of each single byte
  std::vector<std::array<uint32_t, 3>> merges;  // rank order: {left, right, new id}
  std::vector<uint32_t> merge_rank;      // see TokenizerParts
  std::vector<std::pair<uint32_t, std::string>> tokens;  // see TokenizerParts
  PairMap ranks;                         // pair -> (rank << 32) | new id
  std::vector<std::string> vocab;        // bytes of every id (a special token: its name)
  std::vector<uint8_t> special;          // 1 for special tokens
  std::vector<std::pair<std::string, uint32_t>> specials;  // name, id
  uint32_t bos = 0;
  std::vector<uint32_t> token_bytes;
  std::string hash;
  std::string kind = "bpe";              // see TokenizerParts
  bool ignore_merges = false;            // see TokenizerParts
  WholeTokenMap whole;                   // filled when ignore_merges
  // No merge creates a pair ranked below itself (true for the strict kinds): merging every
  // occurrence of the best pair in one pass then equals merging the leftmost one at a time.
  bool ordered = true;

  // Write the BPE ids of one pre-split chunk to out (room for chunk.size() ids); returns the count.
  size_t encode_chunk(std::string_view chunk, uint32_t* out) const;
  // Encode a whole text with a caller-owned scratch/cache (see tokenizer.cpp).
  struct Worker;
  // Appends to out (a text of n bytes never has more than n ids).
  void encode_into(Worker& w, std::string_view text, std::vector<uint32_t>& out) const;
  // JSON text of the clocklm format (canonical: the hash is computed over it).
  std::string to_json() const;
  // The parts this tokenizer was built from.
  TokenizerParts parts() const;
};

// Build a Tokenizer from its parts: fills the derived tables (ranks, vocab, token_bytes, hash),
// checking the parts as their kind requires (see TokenizerParts::kind). Throws Error naming
// `what` on bad input.
Tokenizer build_tokenizer(TokenizerParts p, const std::string& what);

// Most ids a vocabulary may have: ids are stored as uint32 and shards hold at most 4-byte tokens,
// but no real vocabulary comes near this, so a larger count is a corrupt file.
inline constexpr uint32_t kMaxVocab = uint32_t(1) << 24;

// Ids below the vocabulary size that a loaded vocabulary leaves undefined become special tokens
// named <|unused_ID|> (tiktoken's cl100k_base has such gaps), at most this many.
inline constexpr uint32_t kMaxUnusedIds = 1u << 16;
void fill_unused_ids(TokenizerParts& p, const std::vector<uint8_t>& defined, const std::string& what);

// The document separator of a loaded vocabulary and the --bos / --add-bos options (see
// docs/TOKENIZER.md): `preferred` names a token the format itself puts before every text, if any.
void choose_bos(TokenizerParts& p, const TokenizerOptions& opt, const std::string& preferred,
                const std::string& what);
// Apply --bos / --add-bos to a tokenizer that already has a document separator.
Tokenizer apply_bos_options(Tokenizer t, const TokenizerOptions& opt, const std::string& what);

// GPT-2's encoder.json + vocab.bpe from a folder.
Tokenizer load_gpt2(const std::string& dir);
// The same from the two files' contents; `dir` names them in errors.
Tokenizer parse_gpt2(std::string_view encoder_json, std::string_view vocab_bpe, const std::string& dir);

// Run fn(i, thread) for i in [0, n) on `threads` threads with dynamic scheduling.
template <class F>
void parallel_for(size_t n, int threads, F&& fn) {
  if (threads < 1) threads = 1;
  if (size_t(threads) > n) threads = int(n);
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  std::atomic<size_t> next{0};
  std::exception_ptr err;
  std::atomic<bool> failed{false};
  auto body = [&](int t) {
    try {
      for (size_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < n;) fn(i, t);
    } catch (...) {
      if (!failed.exchange(true)) err = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
  body(0);
  for (auto& th : pool) th.join();
  if (err) std::rethrow_exception(err);
}

// Fast hash of a pre-split chunk, for the encoder cache and the trainer's chunk table.
inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xff51afd7ed558ccdULL);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  h = (h ^ v) * 0x94d049bb133111ebULL;
  return h ^ (h >> 32);
}

// Byte equality of two chunks of length n (the cache and chunk-table key check).
inline bool same_bytes(const char* a, const char* b, size_t n) {
  while (n >= 8) {
    uint64_t x, y;
    std::memcpy(&x, a, 8);
    std::memcpy(&y, b, 8);
    if (x != y) return false;
    a += 8;
    b += 8;
    n -= 8;
  }
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace clm

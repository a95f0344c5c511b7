// The byte-level BPE encoder/decoder behind clm::Tokenizer: merge application per pre-split chunk
// (a rescan for short chunks, a heap over a linked list for long ones), a bounded per-thread cache
// of chunk -> ids, parallel batch encoding, and the clocklm tokenizer file (docs/TOKENIZER.md).
#include <algorithm>
#include <filesystem>
#include <cstring>
#include <queue>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/common.h"
#include "core/json_get.h"
#include "core/json_parse.h"
#include "tok/bpe.h"
#include "tok/empty_match.h"
#include "tok/file_limits.h"
#include "tok/hf_json.h"
#include "tok/tiktoken.h"

namespace clm {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Merge application for one chunk. BPE semantics (as GPT-2's encoder.py): repeatedly take the
// lowest-ranked adjacent pair present and merge all its occurrences left to right.

static constexpr size_t kShortChunk = 64;

size_t TokenizerImpl::encode_chunk(std::string_view chunk, uint32_t* out) const {
  const uint8_t* s = reinterpret_cast<const uint8_t*>(chunk.data());
  const size_t n = chunk.size();
  if (n == 0) return 0;
  if (n == 1) {
    out[0] = byte_id[s[0]];
    return 1;
  }
  if (ignore_merges) {
    if (whole.find(chunk, vocab, out[0])) return 1;
  }
  if (n == 2) {
    const uint64_t* v = ranks.find(PairMap::key(byte_id[s[0]], byte_id[s[1]]));
    if (v) {
      out[0] = uint32_t(*v);
      return 1;
    }
    out[0] = byte_id[s[0]];
    out[1] = byte_id[s[1]];
    return 2;
  }
  if (n <= kShortChunk) {
    // Short chunk: keep the rank of every adjacent pair and rescan for the minimum. Quadratic in
    // the worst case but chunks this short are faster this way than with a heap. With ordered
    // merges every occurrence of the best pair merges in one pass; otherwise only the leftmost
    // (a merge may create a pair ranked below it, which must then go first).
    uint32_t sym[kShortChunk];
    uint64_t pr[kShortChunk];  // (rank << 32 | new id) of pair (i, i+1), ~0 if not a merge
    size_t len = n;
    for (size_t i = 0; i < n; ++i) sym[i] = byte_id[s[i]];
    auto lookup = [&](uint32_t a, uint32_t b) {
      const uint64_t* v = ranks.find(PairMap::key(a, b));
      return v ? *v : ~0ull;
    };
    for (size_t i = 0; i + 1 < len; ++i) pr[i] = lookup(sym[i], sym[i + 1]);
    while (len > 1) {
      uint64_t best = ~0ull;
      for (size_t i = 0; i + 1 < len; ++i) best = std::min(best, pr[i]);
      if (best == ~0ull) break;
      const uint32_t nid = uint32_t(best);
      // Merge every occurrence left to right, building the new pair ranks as we go: a pair of two
      // symbols copied from adjacent old positions keeps its old rank, any other is looked up.
      uint64_t npr[kShortChunk];
      size_t w = 0, prev_src = SIZE_MAX;  // old index of sym[w-1] when it was a plain copy
      bool merged = false;
      for (size_t i = 0; i < len;) {
        if (i + 1 < len && pr[i] == best && (ordered || !merged)) {
          merged = true;
          sym[w] = nid;
          if (w) npr[w - 1] = lookup(sym[w - 1], nid);
          prev_src = SIZE_MAX;
          i += 2;
        } else {
          const uint32_t x = sym[i];
          sym[w] = x;
          if (w) npr[w - 1] = (prev_src != SIZE_MAX && prev_src + 1 == i) ? pr[prev_src] : lookup(sym[w - 1], x);
          prev_src = i;
          i += 1;
        }
        ++w;
      }
      len = w;
      std::memcpy(pr, npr, sizeof(uint64_t) * (len ? len - 1 : 0));
    }
    std::memcpy(out, sym, len * sizeof(uint32_t));
    return len;
  }
  // Long chunk: doubly linked list of symbols and a min-heap of (rank, position): the lowest-ranked
  // pair merges first, the leftmost among equals (Hugging Face's and tiktoken's rule). With
  // ordered merges that equals "merge all occurrences left to right", as a merge then never
  // creates a pair ranked at or before itself.
  std::vector<uint32_t> sym(n), prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    sym[i] = byte_id[s[i]];
    prev[i] = uint32_t(i - 1);  // wraps to ~0 for i == 0
    next[i] = uint32_t(i + 1);
  }
  const uint32_t kNone = ~0u, end = uint32_t(n);
  prev[0] = kNone;
  using Entry = std::pair<uint64_t, uint32_t>;  // (rank << 32 | new id, left position)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](uint32_t i) {
    if (i == kNone || next[i] == end) return;
    const uint64_t* v = ranks.find(PairMap::key(sym[i], sym[next[i]]));
    if (v) heap.push({*v, i});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<uint8_t> dead(n, 0);
  while (!heap.empty()) {
    auto [v, i] = heap.top();
    heap.pop();
    if (dead[i] || next[i] == end) continue;
    const uint64_t* cur = ranks.find(PairMap::key(sym[i], sym[next[i]]));
    if (!cur || *cur != v) continue;  // stale entry
    uint32_t j = next[i];
    sym[i] = uint32_t(v);
    dead[j] = 1;
    next[i] = next[j];
    if (next[j] != end) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  size_t k = 0;
  for (uint32_t i = 0; i != end; i = next[i]) out[k++] = sym[i];
  return k;
}

// ---------------------------------------------------------------------------------------------
// Per-thread worker: regex scratch plus a bounded cache of chunk -> ids (open addressing; it grows
// from 1K to 256K slots and is emptied when full, so memory stays bounded on any input).


struct ChunkCache {
  static constexpr size_t kMaxSlots = size_t(1) << 18;
  static constexpr size_t kMaxKey = kShortChunk;
  struct Slot {
    uint64_t h;
    uint32_t key_off, ids_off;
    uint16_t key_len, ids_len;  // key_len == 0: empty
  };
  std::vector<Slot> slots;
  std::string keys;
  std::vector<uint32_t> ids;
  size_t used = 0;

  void reset(size_t n) {
    slots.assign(n, Slot{0, 0, 0, 0, 0});
    keys.clear();
    ids.clear();
    used = 0;
  }
  // Returns the slot holding chunk, or the empty slot where it belongs.
  Slot* probe(std::string_view c, uint64_t h) {
    size_t mask = slots.size() - 1;
    for (size_t i = size_t(h) & mask;; i = (i + 1) & mask) {
      Slot& sl = slots[i];
      if (sl.key_len == 0) return &sl;
      if (sl.h == h && sl.key_len == c.size() && std::memcmp(keys.data() + sl.key_off, c.data(), c.size()) == 0)
        return &sl;
    }
  }
  void insert(std::string_view c, uint64_t h, const uint32_t* v, size_t nv) {
    if (slots.empty()) reset(1024);
    if ((used + 1) * 2 > slots.size()) {
      // Grow (rehash) until the cap, then start over empty.
      if (slots.size() < kMaxSlots) {
        std::vector<Slot> old = std::move(slots);
        slots.assign(old.size() * 2, Slot{0, 0, 0, 0, 0});
        size_t mask = slots.size() - 1;
        for (const Slot& o : old) {
          if (!o.key_len) continue;
          size_t i = size_t(o.h) & mask;
          while (slots[i].key_len) i = (i + 1) & mask;
          slots[i] = o;
        }
      } else {
        reset(kMaxSlots);
      }
    }
    Slot* sl = probe(c, h);
    if (sl->key_len) return;
    sl->h = h;
    sl->key_off = uint32_t(keys.size());
    sl->key_len = uint16_t(c.size());
    sl->ids_off = uint32_t(ids.size());
    sl->ids_len = uint16_t(nv);
    keys.append(c);
    ids.insert(ids.end(), v, v + nv);
    ++used;
  }
};

struct TokenizerImpl::Worker {
  static constexpr size_t kBuf = size_t(1) << 14;
  explicit Worker(const TokenizerImpl& t) : sc(*t.splitter) {}
  SplitScratch sc;
  ChunkCache cache;
  std::vector<uint32_t> buf;  // output staging, see encode_into
};

void TokenizerImpl::encode_into(Worker& w, std::string_view text, std::vector<uint32_t>& out) const {
  // Ids go through a raw pointer into the worker's buffer, flushed to `out` in blocks: no
  // per-chunk growth checks and no zero-filling of a worst-case (one id per byte) output.
  std::vector<uint32_t>& buf = w.buf;
  if (buf.size() < Worker::kBuf) buf.resize(Worker::kBuf);
  uint32_t* o = buf.data();
  uint32_t* lim = buf.data() + buf.size();
  auto flush = [&] {
    out.insert(out.end(), buf.data(), o);
    o = buf.data();
  };
  ChunkCache& cache = w.cache;
  pre_split(w.sc, text, [&](std::string_view c) {
    if (size_t(lim - o) < c.size()) {
      flush();
      if (buf.size() < c.size()) {  // a chunk longer than the buffer (megabytes of one letter...)
        buf.resize(c.size());
        o = buf.data();
        lim = buf.data() + buf.size();
      }
    }
    if (c.size() <= 2 || c.size() > ChunkCache::kMaxKey) {
      o += encode_chunk(c, o);
      return;
    }
    uint64_t h = hash_bytes(c.data(), c.size());
    if (!cache.slots.empty()) {
      const size_t mask = cache.slots.size() - 1;
      for (size_t i = size_t(h) & mask;; i = (i + 1) & mask) {
        const ChunkCache::Slot& sl = cache.slots[i];
        if (sl.key_len == 0) break;
        if (sl.h == h && sl.key_len == c.size() && same_bytes(cache.keys.data() + sl.key_off, c.data(), c.size())) {
          const uint32_t* p = cache.ids.data() + sl.ids_off;
          for (size_t k = 0; k < sl.ids_len; ++k) o[k] = p[k];
          o += sl.ids_len;
          return;
        }
      }
    }
    size_t k = encode_chunk(c, o);
    cache.insert(c, h, o, k);
    o += k;
  });
  flush();
}

// ---------------------------------------------------------------------------------------------
// Tokenizer methods.

static const TokenizerImpl& get(const Tokenizer& t) {
  if (!t.impl) fail("tokenizer used before it was loaded");
  return *t.impl;
}

// Texts at least this large are cut into pieces (see cut_points) and encoded in parallel.
static constexpr size_t kParallelPiece = size_t(1) << 20;

std::vector<uint32_t> Tokenizer::encode(std::string_view text) const {
  const TokenizerImpl& t = get(*this);
  std::vector<uint32_t> out;
  if (text.size() >= 2 * kParallelPiece && t.splitter->newline_cuttable && default_threads() > 1) {
    std::vector<size_t> cuts = cut_points(text, kParallelPiece);
    std::vector<std::string_view> pieces;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) pieces.push_back(text.substr(cuts[i], cuts[i + 1] - cuts[i]));
    auto parts = encode_batch(pieces);
    size_t total = 0;
    for (auto& p : parts) total += p.size();
    out.reserve(total);
    for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  }
  TokenizerImpl::Worker w(t);
  out.reserve(text.size() / 4 + 16);
  t.encode_into(w, text, out);
  return out;
}

std::vector<std::vector<uint32_t>> Tokenizer::encode_batch(const std::vector<std::string_view>& docs) const {
  const TokenizerImpl& t = get(*this);
  std::vector<std::vector<uint32_t>> out(docs.size());
  int threads = default_threads();
  std::vector<std::unique_ptr<TokenizerImpl::Worker>> workers(size_t(std::max(threads, 1)));
  parallel_for(docs.size(), threads, [&](size_t i, int tid) {
    auto& w = workers[size_t(tid)];
    if (!w) w = std::make_unique<TokenizerImpl::Worker>(t);
    out[i].reserve(docs[i].size() / 4 + 16);
    t.encode_into(*w, docs[i], out[i]);
  });
  return out;
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids) const {
  const TokenizerImpl& t = get(*this);
  size_t total = 0;
  for (uint32_t id : ids) {
    if (id >= t.vocab.size()) fail("token id {} out of range (vocab size {})", id, t.vocab.size());
    total += t.vocab[id].size();
  }
  std::string out;
  out.reserve(total);
  for (uint32_t id : ids) out += t.vocab[id];
  return out;
}

uint32_t Tokenizer::vocab_size() const { return uint32_t(get(*this).vocab.size()); }
uint32_t Tokenizer::bos_id() const { return get(*this).bos; }
std::string Tokenizer::bos_name() const { return get(*this).vocab[get(*this).bos]; }
std::string Tokenizer::kind() const { return get(*this).kind; }
const std::vector<std::pair<std::string, uint32_t>>& Tokenizer::special_tokens() const { return get(*this).specials; }
const std::vector<uint32_t>& Tokenizer::token_bytes() const { return get(*this).token_bytes; }
std::string Tokenizer::hash() const { return get(*this).hash; }

// ---------------------------------------------------------------------------------------------
// Building, saving and loading.

// Most bytes all token texts together may hold (real vocabularies hold a few megabytes).
static constexpr uint64_t kMaxVocabBytes = uint64_t(1) << 28;

void WholeTokenMap::build(const std::vector<std::string>& vocab, const std::vector<uint8_t>& special) {
  size_t cap = 16;
  while (cap < vocab.size() * 2) cap <<= 1;
  slots.assign(cap, 0);
  mask = cap - 1;
  for (uint32_t id = 0; id < vocab.size(); ++id) {
    if (special[id]) continue;
    const std::string& v = vocab[id];
    size_t i = size_t(hash_bytes(v.data(), v.size())) & mask;
    while (slots[i] && vocab[slots[i] - 1] != v) i = (i + 1) & mask;
    if (!slots[i]) slots[i] = id + 1;  // the first id of a text wins (the formats allow one)
  }
}

bool WholeTokenMap::find(std::string_view s, const std::vector<std::string>& vocab, uint32_t& id) const {
  for (size_t i = size_t(hash_bytes(s.data(), s.size())) & mask;; i = (i + 1) & mask) {
    uint32_t v = slots[i];
    if (!v) return false;
    const std::string& t = vocab[v - 1];
    if (t.size() == s.size() && same_bytes(t.data(), s.data(), s.size())) {
      id = v - 1;
      return true;
    }
  }
}

namespace {

// Fills t.vocab from the parts and checks them (see TokenizerParts::kind).
struct VocabBuilder {
  TokenizerImpl& t;
  const TokenizerParts& p;
  const std::string& what;
  const bool strict;
  std::vector<uint8_t> defined;
  uint64_t vocab_bytes = 0;

  VocabBuilder(TokenizerImpl& ti, const TokenizerParts& pa, const std::string& w)
      : t(ti), p(pa), what(w), strict(pa.kind == "bpe" || pa.kind == "gpt2"), defined(pa.vocab_size, 0) {}

  void define(uint32_t id, const char* role) {
    if (id >= p.vocab_size) fail("{}: {} id {} out of range (vocab size {})", what, role, id, p.vocab_size);
    if (defined[id]) fail("{}: id {} is defined twice", what, id);
    defined[id] = 1;
  }
  void add_bytes(size_t n, size_t r) {
    vocab_bytes += n;
    if (vocab_bytes > kMaxVocabBytes)
      fail("{}: the merges spell tokens of more than {} bytes in all (merge {})", what, kMaxVocabBytes, r);
  }
  bool usable(uint32_t a) const { return a < p.vocab_size && defined[a] && !t.special[a]; }

  static constexpr uint32_t kDone = ~0u;

  // Merge r: strict kinds need both parts defined by now and a new result; the others may use a
  // part defined later (returns the id it waits for) and may spell an existing token again.
  uint32_t merge(size_t r) {
    auto [a, b, c] = p.merges[r];
    if (!usable(a) || !usable(b)) {
      bool bad = a >= p.vocab_size || b >= p.vocab_size || (defined[a] && t.special[a]) ||
                 (defined[b] && t.special[b]);
      if (!strict && !bad) return defined[a] ? b : a;
      fail("{}: merge {} ({} {}) uses an id not defined by the bytes or an earlier merge", what, r, a, b);
    }
    if (!strict && c < p.vocab_size && defined[c]) {
      if (t.special[c] || t.vocab[c].size() != t.vocab[a].size() + t.vocab[b].size() ||
          t.vocab[c].compare(0, t.vocab[a].size(), t.vocab[a]) != 0 ||
          t.vocab[c].compare(t.vocab[a].size(), std::string::npos, t.vocab[b]) != 0)
        fail("{}: merge {} ({} {}) makes id {}, which is a different token", what, r, a, b, c);
      return kDone;
    }
    define(c, "merge");
    add_bytes(t.vocab[a].size() + t.vocab[b].size(), r);
    t.vocab[c] = t.vocab[a] + t.vocab[b];
    return kDone;
  }

  // All merges. A merge waiting for a part is parked under that id and retried once the id is
  // defined, so each merge is retried at most twice.
  void merges() {
    std::unordered_map<uint32_t, std::vector<size_t>> waiting;
    std::vector<size_t> work;
    auto run = [&](size_t r) {
      uint32_t w = merge(r);
      if (w != kDone) {
        waiting[w].push_back(r);
        return;
      }
      auto it = waiting.find(p.merges[r][2]);
      if (it == waiting.end()) return;
      for (size_t q : it->second) work.push_back(q);
      waiting.erase(it);
    };
    for (size_t r = 0; r < p.merges.size(); ++r) {
      run(r);
      while (!work.empty()) {
        size_t q = work.back();
        work.pop_back();
        run(q);
      }
    }
    if (!waiting.empty()) {
      size_t r = SIZE_MAX;
      for (auto& [id, list] : waiting)
        for (size_t q : list) r = std::min(r, q);
      fail("{}: merge {} ({} {}) uses an id that no byte, merge or token defines", what, r, p.merges[r][0],
           p.merges[r][1]);
    }
  }
};

// Whether no merge can create a pair ranked below itself: every merge ranks after every merge
// that makes one of its parts (parts no merge makes never enter a merge sequence).
bool merges_ordered(const TokenizerParts& p) {
  auto rank = [&](size_t r) -> int64_t { return p.merge_rank.empty() ? int64_t(r) : int64_t(p.merge_rank[r]); };
  std::vector<int64_t> made(p.vocab_size, -1);
  for (size_t r = 0; r < p.merges.size(); ++r) made[p.merges[r][2]] = std::max(made[p.merges[r][2]], rank(r));
  for (size_t r = 0; r < p.merges.size(); ++r)
    if (made[p.merges[r][0]] >= rank(r) || made[p.merges[r][1]] >= rank(r)) return false;
  return true;
}

}  // namespace

Tokenizer build_tokenizer(TokenizerParts p, const std::string& what) {
  if (p.vocab_size > kMaxVocab) fail("{}: vocabulary of {} ids is too large (at most {})", what, p.vocab_size, kMaxVocab);
  if (!p.merge_rank.empty() && p.merge_rank.size() != p.merges.size())
    fail("{}: {} merge ranks for {} merges", what, p.merge_rank.size(), p.merges.size());
  for (size_t r = 1; r < p.merge_rank.size(); ++r)
    if (p.merge_rank[r] < p.merge_rank[r - 1]) fail("{}: merge ranks must not decrease (merge {})", what, r);
  auto t = std::make_shared<TokenizerImpl>();
  t->pattern = p.pattern;
  t->kind = p.kind;
  try {
    t->splitter = std::make_unique<PreSplitter>(t->pattern);
  } catch (const Error& e) {
    fail("{}: {}", what, e.what());
  }
  refuse_empty_matches(*t->splitter, what);
  const uint32_t vocab_size = p.vocab_size;
  t->vocab.assign(vocab_size, std::string());
  t->special.assign(vocab_size, 0);
  VocabBuilder vb(*t, p, what);
  for (int b = 0; b < 256; ++b) {
    vb.define(p.byte_id[b], "byte");
    t->byte_id[b] = p.byte_id[b];
    t->vocab[p.byte_id[b]] = std::string(1, char(b));
  }
  vb.vocab_bytes = 256;
  bool have_bos = false;
  std::vector<std::string_view> names;
  for (auto& sp : p.specials) names.push_back(sp.first);
  std::sort(names.begin(), names.end());
  for (size_t i = 1; i < names.size(); ++i)
    if (names[i] == names[i - 1]) fail("{}: two special tokens are named {}", what, names[i]);
  for (auto& [name, id] : p.specials) {
    if (name.empty()) fail("{}: empty special token name", what);
    if (!valid_utf8(name)) fail("{}: special token name '{}' is not UTF-8", what, json_text(nlohmann::json(name)));
    vb.define(id, "special token");
    t->special[id] = 1;
    t->vocab[id] = name;
    if (id == p.bos) have_bos = true;
  }
  if (vb.strict && !p.tokens.empty()) fail("{}: a {} tokenizer has no tokens outside its merges", what, p.kind);
  for (auto& [id, bytes] : p.tokens) {
    if (bytes.empty()) fail("{}: token {} is empty", what, id);
    vb.define(id, "token");
    vb.add_bytes(bytes.size(), 0);
    t->vocab[id] = bytes;
  }
  // A merge's text is its parts' texts joined, so lengths can double with every merge: the total
  // is checked before each string is built, or a few dozen merges would ask for terabytes.
  vb.merges();
  t->ranks.reserve(p.merges.size());
  for (size_t r = 0; r < p.merges.size(); ++r) {
    auto [a, b, c] = p.merges[r];
    uint64_t k = PairMap::key(a, b);
    if (t->ranks.find(k)) fail("{}: merge {} ({} {}) is listed twice", what, r, a, b);
    uint64_t rank = p.merge_rank.empty() ? r : p.merge_rank[r];
    t->ranks.insert(k, (rank << 32) | c);
  }
  if (!have_bos) fail("{}: the BOS id {} is not a special token", what, p.bos);
  for (uint32_t id = 0; id < vocab_size; ++id)
    if (!vb.defined[id]) fail("{}: id {} is not defined (vocab size {})", what, id, vocab_size);
  t->ordered = vb.strict || merges_ordered(p);
  t->ignore_merges = p.ignore_merges;
  if (t->ignore_merges) t->whole.build(t->vocab, t->special);
  t->merges = std::move(p.merges);
  t->merge_rank = std::move(p.merge_rank);
  t->tokens = std::move(p.tokens);
  t->specials = std::move(p.specials);
  t->bos = p.bos;
  t->token_bytes.resize(vocab_size);
  for (uint32_t id = 0; id < vocab_size; ++id) t->token_bytes[id] = t->special[id] ? 0 : uint32_t(t->vocab[id].size());
  std::string js = t->to_json();
  t->hash = hex64(fnv1a64(js.data(), js.size()));
  Tokenizer tok;
  tok.impl = std::move(t);
  return tok;
}

TokenizerParts TokenizerImpl::parts() const {
  TokenizerParts p;
  p.pattern = pattern;
  std::memcpy(p.byte_id, byte_id, sizeof byte_id);
  p.merges = merges;
  p.merge_rank = merge_rank;
  p.specials = specials;
  p.tokens = tokens;
  p.ignore_merges = ignore_merges;
  p.bos = bos;
  p.vocab_size = uint32_t(vocab.size());
  p.kind = kind;
  return p;
}

static std::string hex_of(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

static std::string bytes_of_hex(const std::string& hex, const std::string& file) {
  auto val = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    fail("{}: token bytes '{}' are not lowercase hex", file, hex.substr(0, 40));
  };
  if (hex.size() % 2) fail("{}: token bytes '{}' are not lowercase hex", file, hex.substr(0, 40));
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) out[i] = char(val(hex[2 * i]) * 16 + val(hex[2 * i + 1]));
  return out;
}

std::string TokenizerImpl::to_json() const {
  using nlohmann::json;
  // Version 1 for what it can hold (so the hashes of such tokenizers never change); version 2 adds
  // the fields of vocabularies loaded from other formats.
  const bool v2 = !(kind == "bpe" || kind == "gpt2") || ignore_merges || !merge_rank.empty() || !tokens.empty();
  std::string s = "{\n";
  s += fmt::format("\"format\": \"clocklm-bpe\",\n\"version\": {},\n", v2 ? 2 : 1);
  s += fmt::format("\"kind\": {},\n", json(kind).dump());
  s += fmt::format("\"pattern\": {},\n", json(pattern).dump());
  s += fmt::format("\"vocab_size\": {},\n", vocab.size());
  s += fmt::format("\"bos\": {},\n", bos);
  s += "\"special_tokens\": [";
  for (size_t i = 0; i < specials.size(); ++i)
    s += fmt::format("{}[{}, {}]", i ? ", " : "", json(specials[i].first).dump(), specials[i].second);
  s += "],\n\"byte_ids\": [";
  for (int b = 0; b < 256; ++b) s += fmt::format("{}{}", b ? "," : "", byte_id[b]);
  if (v2) {
    s += fmt::format("],\n\"ignore_merges\": {},\n\"tokens\": [", ignore_merges ? "true" : "false");
    for (size_t i = 0; i < tokens.size(); ++i) s += fmt::format("{}[{}, \"{}\"]", i ? ",\n" : "\n", tokens[i].first, hex_of(tokens[i].second));
    s += "],\n\"merge_ranks\": [";
    for (size_t r = 0; r < merge_rank.size(); ++r) s += fmt::format("{}{}", r ? "," : "", merge_rank[r]);
  }
  s += "],\n\"merges\": [\n";
  for (size_t r = 0; r < merges.size(); ++r)
    s += fmt::format("[{},{},{}]{}\n", merges[r][0], merges[r][1], merges[r][2], r + 1 < merges.size() ? "," : "");
  s += "]\n}\n";
  return s;
}

void Tokenizer::save(const std::string& path) const {
  const TokenizerImpl& t = get(*this);
  std::string p = path;
  std::error_code ec;
  if (fs::is_directory(p, ec)) p = (fs::path(p) / "tokenizer.json").string();
  atomic_write(p, t.to_json());
}

// The clocklm format from parsed JSON.
static Tokenizer parse_clocklm(const nlohmann::json& j, const std::string& file) {
  using nlohmann::json;
  try {
    if (!j.is_object() || !j.contains("format") || j["format"] != "clocklm-bpe")
      fail("{} is not a clocklm tokenizer file (expected \"format\": \"clocklm-bpe\")", file);
    auto id = [&](const json& v, const char* what) { return json_int<uint32_t>(v, file + ": " + what); };
    int version = json_int<int>(j.at("version"), file + ": version");
    if (version != 1 && version != 2) fail("{}: unsupported tokenizer file version {}", file, version);
    std::string pattern = json_str(j.at("pattern"), file + ": pattern");
    uint32_t vocab_size = id(j.at("vocab_size"), "vocab_size");
    uint32_t bos = id(j.at("bos"), "bos");
    std::string kind = j.contains("kind") ? json_str(j["kind"], file + ": kind") : std::string("bpe");
    const bool strict = kind == "bpe" || kind == "gpt2";
    if (strict != (version == 1)) fail("{}: a version {} tokenizer file cannot be of kind {}", file, version, kind);
    const json& sj = j.at("special_tokens");
    const json& bj = j.at("byte_ids");
    const json& mj = j.at("merges");
    if (!sj.is_array()) fail("{}: special_tokens must be a list of [name, id]", file);
    if (!bj.is_array() || bj.size() != 256) fail("{}: byte_ids must list 256 ids", file);
    if (!mj.is_array()) fail("{}: merges must be a list of [left, right, new_id]", file);
    TokenizerParts p;
    if (version == 2) {
      const json& tj = j.at("tokens");
      const json& rj = j.at("merge_ranks");
      if (!tj.is_array()) fail("{}: tokens must be a list of [id, hex bytes]", file);
      if (!rj.is_array() || (!rj.empty() && rj.size() != mj.size()))
        fail("{}: merge_ranks must be empty or list a rank per merge", file);
      if (!j.at("ignore_merges").is_boolean()) fail("{}: ignore_merges must be true or false", file);
      p.ignore_merges = j["ignore_merges"].get<bool>();
      for (auto& e : tj) {
        if (!e.is_array() || e.size() != 2) fail("{}: each token must be [id, hex bytes]", file);
        p.tokens.emplace_back(id(e[0], "token id"), bytes_of_hex(json_str(e[1], file + ": token bytes"), file));
        check_token_size(p.tokens.back().second.size(), file, fmt::format("token {}", p.tokens.back().first));
      }
      for (auto& r : rj) p.merge_rank.push_back(id(r, "merge rank"));
    }
    // Every id is defined once (a byte, a token or a special token, or by merges), so the
    // vocabulary size is bounded by the lists; checking it first keeps a corrupt count from
    // sizing tables. The strict kinds define every id exactly once.
    const uint64_t listed = 256 + mj.size() + sj.size() + p.tokens.size();
    if (vocab_size > kMaxVocab || (strict ? uint64_t(vocab_size) != listed : uint64_t(vocab_size) > listed))
      fail("{}: vocab_size {} does not match 256 bytes + {} merges + {} special tokens", file,
           vocab_size, mj.size(), sj.size());
    for (auto& e : sj) {
      if (!e.is_array() || e.size() != 2) fail("{}: each special token must be [name, id]", file);
      p.specials.emplace_back(json_str(e[0], file + ": special token name"), id(e[1], "special token id"));
    }
    for (int b = 0; b < 256; ++b) p.byte_id[b] = id(bj[size_t(b)], "byte id");
    p.merges.reserve(mj.size());
    for (auto& m : mj) {
      if (!m.is_array() || m.size() != 3) fail("{}: each merge must be [left, right, new_id]", file);
      p.merges.push_back({id(m[0], "merge id"), id(m[1], "merge id"), id(m[2], "merge id")});
    }
    p.pattern = std::move(pattern);
    p.bos = bos;
    p.vocab_size = vocab_size;
    p.kind = kind;
    return build_tokenizer(std::move(p), file);
  } catch (const json::exception& e) {
    fail("malformed tokenizer file {}: {}", file, e.what());
  }
}

Tokenizer Tokenizer::from_json(std::string_view text, const std::string& file) {
  check_tokenizer_size(text.size(), file);
  nlohmann::json j;
  if (std::string why; !try_parse_json(text, j, &why)) fail("malformed tokenizer file {}: {}", file, why);
  return parse_clocklm(j, file);
}

static bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// One tokenizer file, its format told by its name and content.
static Tokenizer load_file(const std::string& file, const TokenizerOptions& opt) {
  std::string text = read_tokenizer_file(file);
  if (ends_with(file, ".tiktoken")) return parse_tiktoken_ranks(text, file, opt);
  if (!opt.pattern.empty() || !opt.specials.empty())
    fail("{}: a split pattern and special tokens can be given only for a .tiktoken rank file", file);
  if (ends_with(file, ".pkl") || (!text.empty() && static_cast<unsigned char>(text[0]) == 0x80))
    return parse_tiktoken_pickle(text, file, opt);
  nlohmann::json j;
  if (std::string why; !try_parse_json(text, j, &why)) fail("malformed tokenizer file {}: {}", file, why);
  if (j.is_object() && j.contains("model") && !j.contains("format")) return parse_hf_tokenizer(j, file, opt);
  return apply_bos_options(parse_clocklm(j, file), opt, file);
}

// The one .tiktoken file in a folder, or "".
static std::string tiktoken_in(const fs::path& dir) {
  std::string found;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!ends_with(it->path().filename().string(), ".tiktoken")) continue;
    if (!found.empty()) fail("{} holds more than one .tiktoken file; name the one to use", dir.string());
    found = it->path().string();
  }
  return found;
}

Tokenizer Tokenizer::load(const std::string& path, const TokenizerOptions& opt) {
  std::error_code ec;
  fs::path p(path);
  auto gpt2 = [&](const std::string& dir) {
    if (!opt.pattern.empty() || !opt.specials.empty())
      fail("{}: a split pattern and special tokens can be given only for a .tiktoken rank file", dir);
    return apply_bos_options(load_gpt2(dir), opt, dir);
  };
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "tokenizer.json", ec)) return load_file((p / "tokenizer.json").string(), opt);
    if (fs::exists(p / "tokenizer.pkl", ec)) return load_file((p / "tokenizer.pkl").string(), opt);
    if (fs::exists(p / "encoder.json", ec) && fs::exists(p / "vocab.bpe", ec)) return gpt2(path);
    std::string tt = tiktoken_in(p);
    if (!tt.empty()) return load_file(tt, opt);
    fail("no tokenizer in {} (expected tokenizer.json, tokenizer.pkl, GPT-2's encoder.json + vocab.bpe, or a "
         ".tiktoken file)", path);
  }
  if (!fs::exists(p, ec)) fail("tokenizer not found: {}", path);
  auto name = p.filename().string();
  if ((name == "encoder.json" || name == "vocab.bpe") && fs::exists(p.parent_path() / "encoder.json", ec) &&
      fs::exists(p.parent_path() / "vocab.bpe", ec)) {
    return gpt2(p.parent_path().empty() ? "." : p.parent_path().string());
  }
  return load_file(path, opt);
}

}  // namespace clm

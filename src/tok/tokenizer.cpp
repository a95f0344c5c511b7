// The byte-level BPE encoder/decoder behind clm::Tokenizer: merge application per pre-split chunk
// (a rescan for short chunks, a heap over a linked list for long ones), a bounded per-thread cache
// of chunk -> ids, parallel batch encoding, and the clocklm tokenizer file (docs/TOKENIZER.md).
#include <algorithm>
#include <filesystem>
#include <queue>

#include <nlohmann/json.hpp>

#include "core/common.h"
#include "core/json_get.h"
#include "tok/bpe.h"

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
    // the worst case but chunks this short are faster this way than with a heap.
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
      for (size_t i = 0; i < len;) {
        if (i + 1 < len && pr[i] == best) {
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
  // Long chunk: doubly linked list of symbols and a min-heap of (rank, position). Entries of equal
  // rank pop left to right, which reproduces "merge all occurrences left to right" because a merge
  // never creates a pair ranked at or before itself (checked when the tokenizer is built).
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
const std::vector<uint32_t>& Tokenizer::token_bytes() const { return get(*this).token_bytes; }
std::string Tokenizer::hash() const { return get(*this).hash; }

// ---------------------------------------------------------------------------------------------
// Building, saving and loading.

// Most bytes all token texts together may hold (real vocabularies hold a few megabytes).
static constexpr uint64_t kMaxVocabBytes = uint64_t(1) << 28;

Tokenizer build_tokenizer(std::string pattern, const uint32_t byte_id[256],
                          std::vector<std::array<uint32_t, 3>> merges,
                          std::vector<std::pair<std::string, uint32_t>> specials, uint32_t bos,
                          uint32_t vocab_size, const std::string& kind, const std::string& what) {
  auto t = std::make_shared<TokenizerImpl>();
  t->pattern = std::move(pattern);
  t->kind = kind;
  t->splitter = std::make_unique<PreSplitter>(t->pattern);
  std::vector<uint8_t> defined(vocab_size, 0);
  t->vocab.assign(vocab_size, std::string());
  t->special.assign(vocab_size, 0);
  auto define = [&](uint32_t id, const char* role) {
    if (id >= vocab_size) fail("{}: {} id {} out of range (vocab size {})", what, role, id, vocab_size);
    if (defined[id]) fail("{}: id {} is defined twice", what, id);
    defined[id] = 1;
  };
  for (int b = 0; b < 256; ++b) {
    define(byte_id[b], "byte");
    t->byte_id[b] = byte_id[b];
    t->vocab[byte_id[b]] = std::string(1, char(b));
  }
  // Rank of the merge that created each id (bytes: -1), to check the ranking is valid: both parts
  // must exist before a merge, so a merge never creates a pair ranked at or before itself.
  t->ranks.reserve(merges.size());
  // A merge's text is its parts' texts joined, so lengths can double with every merge: the total
  // is checked before each string is built, or a few dozen merges would ask for terabytes.
  uint64_t vocab_bytes = 256;
  for (size_t r = 0; r < merges.size(); ++r) {
    auto [a, b, c] = merges[r];
    if (a >= vocab_size || b >= vocab_size || !defined[a] || !defined[b] || t->special[a] || t->special[b])
      fail("{}: merge {} ({} {}) uses an id not defined by the bytes or an earlier merge", what, r, a, b);
    define(c, "merge");
    uint64_t k = PairMap::key(a, b);
    if (t->ranks.find(k)) fail("{}: merge {} ({} {}) is listed twice", what, r, a, b);
    t->ranks.insert(k, (uint64_t(r) << 32) | c);
    vocab_bytes += t->vocab[a].size() + t->vocab[b].size();
    if (vocab_bytes > kMaxVocabBytes)
      fail("{}: the merges spell tokens of more than {} bytes in all (merge {})", what, kMaxVocabBytes, r);
    t->vocab[c] = t->vocab[a] + t->vocab[b];
  }
  bool have_bos = false;
  for (auto& [name, id] : specials) {
    if (name.empty()) fail("{}: empty special token name", what);
    define(id, "special token");
    t->special[id] = 1;
    t->vocab[id] = name;
    if (id == bos) have_bos = true;
  }
  if (!have_bos) fail("{}: the BOS id {} is not a special token", what, bos);
  for (uint32_t id = 0; id < vocab_size; ++id)
    if (!defined[id]) fail("{}: id {} is not defined (vocab size {})", what, id, vocab_size);
  t->merges = std::move(merges);
  t->specials = std::move(specials);
  t->bos = bos;
  t->token_bytes.resize(vocab_size);
  for (uint32_t id = 0; id < vocab_size; ++id) t->token_bytes[id] = t->special[id] ? 0 : uint32_t(t->vocab[id].size());
  std::string js = t->to_json();
  t->hash = hex64(fnv1a64(js.data(), js.size()));
  Tokenizer tok;
  tok.impl = std::move(t);
  return tok;
}

std::string TokenizerImpl::to_json() const {
  using nlohmann::json;
  std::string s = "{\n";
  s += "\"format\": \"clocklm-bpe\",\n\"version\": 1,\n";
  s += fmt::format("\"kind\": {},\n", json(kind).dump());
  s += fmt::format("\"pattern\": {},\n", json(pattern).dump());
  s += fmt::format("\"vocab_size\": {},\n", vocab.size());
  s += fmt::format("\"bos\": {},\n", bos);
  s += "\"special_tokens\": [";
  for (size_t i = 0; i < specials.size(); ++i)
    s += fmt::format("{}[{}, {}]", i ? ", " : "", json(specials[i].first).dump(), specials[i].second);
  s += "],\n\"byte_ids\": [";
  for (int b = 0; b < 256; ++b) s += fmt::format("{}{}", b ? "," : "", byte_id[b]);
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

// Largest vocabulary a tokenizer file may declare: ids are stored as uint32 and shards hold at most
// 4-byte tokens, but no real vocabulary comes near this, so a larger count is a corrupt file.
static constexpr uint32_t kMaxVocab = uint32_t(1) << 24;

Tokenizer Tokenizer::from_json(std::string_view text, const std::string& file) {
  using nlohmann::json;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("malformed tokenizer file {}: {}", file, e.what());
  }
  try {
    if (!j.is_object() || !j.contains("format") || j["format"] != "clocklm-bpe")
      fail("{} is not a clocklm tokenizer file (expected \"format\": \"clocklm-bpe\")", file);
    auto id = [&](const json& v, const char* what) { return json_int<uint32_t>(v, file + ": " + what); };
    int version = json_int<int>(j.at("version"), file + ": version");
    if (version != 1) fail("{}: unsupported tokenizer file version {}", file, version);
    std::string pattern = json_str(j.at("pattern"), file + ": pattern");
    uint32_t vocab_size = id(j.at("vocab_size"), "vocab_size");
    uint32_t bos = id(j.at("bos"), "bos");
    std::string kind = j.contains("kind") ? json_str(j["kind"], file + ": kind") : std::string("bpe");
    const json& sj = j.at("special_tokens");
    const json& bj = j.at("byte_ids");
    const json& mj = j.at("merges");
    if (!sj.is_array()) fail("{}: special_tokens must be a list of [name, id]", file);
    if (!bj.is_array() || bj.size() != 256) fail("{}: byte_ids must list 256 ids", file);
    if (!mj.is_array()) fail("{}: merges must be a list of [left, right, new_id]", file);
    // Every id is defined exactly once (a byte, a merge or a special token), so the vocabulary
    // size follows from the lists; checking it first keeps a corrupt count from sizing tables.
    if (vocab_size > kMaxVocab || uint64_t(vocab_size) != 256 + mj.size() + sj.size())
      fail("{}: vocab_size {} does not match 256 bytes + {} merges + {} special tokens", file,
           vocab_size, mj.size(), sj.size());
    std::vector<std::pair<std::string, uint32_t>> specials;
    for (auto& e : sj) {
      if (!e.is_array() || e.size() != 2) fail("{}: each special token must be [name, id]", file);
      specials.emplace_back(json_str(e[0], file + ": special token name"), id(e[1], "special token id"));
    }
    uint32_t byte_id[256];
    for (int b = 0; b < 256; ++b) byte_id[b] = id(bj[size_t(b)], "byte id");
    std::vector<std::array<uint32_t, 3>> merges;
    merges.reserve(mj.size());
    for (auto& m : mj) {
      if (!m.is_array() || m.size() != 3) fail("{}: each merge must be [left, right, new_id]", file);
      merges.push_back({id(m[0], "merge id"), id(m[1], "merge id"), id(m[2], "merge id")});
    }
    return build_tokenizer(std::move(pattern), byte_id, std::move(merges), std::move(specials), bos, vocab_size,
                           kind, file);
  } catch (const json::exception& e) {
    fail("malformed tokenizer file {}: {}", file, e.what());
  }
}

static Tokenizer load_clocklm(const std::string& file) {
  return Tokenizer::from_json(read_file(file), file);
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::error_code ec;
  fs::path p(path);
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "tokenizer.json", ec)) return load_clocklm((p / "tokenizer.json").string());
    if (fs::exists(p / "encoder.json", ec) && fs::exists(p / "vocab.bpe", ec)) return load_gpt2(path);
    fail("no tokenizer in {} (expected tokenizer.json, or GPT-2's encoder.json + vocab.bpe)", path);
  }
  if (!fs::exists(p, ec)) fail("tokenizer not found: {}", path);
  auto name = p.filename().string();
  if ((name == "encoder.json" || name == "vocab.bpe") && fs::exists(p.parent_path() / "encoder.json", ec) &&
      fs::exists(p.parent_path() / "vocab.bpe", ec)) {
    return load_gpt2(p.parent_path().empty() ? "." : p.parent_path().string());
  }
  return load_clocklm(path);
}

}  // namespace clm

// BPE trainer: pre-splits the training text on all cores into chunks counted by frequency, then
// learns merges with incremental pair counts -- every pair has a count and a list of the unique
// chunks holding it, a max-heap (lazy deletion) yields the most frequent pair, and each merge
// rewrites only the chunks that hold it, adjusting the counts of the pairs next to each merge.
// Ties go to the smaller (left id, right id), so the result depends only on the input text.
#include "tok/train.h"

#include <algorithm>
#include <array>
#include <memory>
#include <queue>

#include <unistd.h>

#include "core/common.h"
#include "tok/bpe.h"

namespace clm {

namespace {

// Open-addressing counter of chunks (views into the training text, which outlives it).
struct ChunkCounter {
  struct E {
    uint64_t h = 0;
    const char* p = nullptr;  // nullptr: empty
    uint64_t n = 0;
    uint64_t count = 0;
  };
  std::vector<E> tab = std::vector<E>(1024);
  size_t used = 0;

  void add(const char* p, size_t n, uint64_t h, uint64_t c) {
    if ((used + 1) * 2 > tab.size()) grow();
    size_t mask = tab.size() - 1;
    for (size_t i = size_t(h) & mask;; i = (i + 1) & mask) {
      E& e = tab[i];
      if (!e.p) {
        e = E{h, p, n, c};
        ++used;
        return;
      }
      if (e.h == h && e.n == n && same_bytes(e.p, p, n)) {
        e.count += c;
        return;
      }
    }
  }
  void grow() {
    std::vector<E> old = std::move(tab);
    tab.assign(old.size() * 2, E{});
    size_t mask = tab.size() - 1;
    for (const E& e : old) {
      if (!e.p) continue;
      size_t i = size_t(e.h) & mask;
      while (tab[i].p) i = (i + 1) & mask;
      tab[i] = e;
    }
  }
};

struct PairStat {
  int64_t count = 0;
  int64_t pushed = -1;        // count of the newest heap entry for this pair
  uint64_t stamp = ~0ull;     // merge step that last touched it
  uint32_t a = 0, b = 0;
  std::vector<uint32_t> where;  // unique chunks that hold (or once held) this pair
};

struct HeapEntry {
  int64_t count;
  uint32_t a, b;
  // std::priority_queue pops the largest: higher count first, then the smaller (a, b).
  bool operator<(const HeapEntry& o) const {
    if (count != o.count) return count < o.count;
    if (a != o.a) return a > o.a;
    return b > o.b;
  }
};

// Special tokens: the caller's, then reserved ones up to 8 in all.
std::vector<std::string> special_token_names(const BpeTrainOptions& opt) {
  std::vector<std::string> names = opt.special_tokens;
  if (names.empty()) names.push_back("<|bos|>");
  for (int k = 0; names.size() < 8; ++k) names.push_back(fmt::format("<|reserved_{}|>", k));
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) fail("empty special token name");
    for (size_t j = 0; j < i; ++j)
      if (names[i] == names[j]) fail("special token {} listed twice", names[i]);
  }
  return names;
}

// The training text, capped at max_chars bytes (cut at a UTF-8 boundary), in pieces of about
// 1 MiB so that one huge document still spreads over all threads. `total` receives its bytes.
std::vector<std::string_view> training_pieces(const std::vector<std::string_view>& docs, int64_t max_chars,
                                              const PreSplitter& splitter, int64_t& total) {
  std::vector<std::string_view> pieces;
  total = 0;
  const size_t kPiece = size_t(1) << 20;
  for (std::string_view doc : docs) {
    if (total >= max_chars) break;
    if (int64_t(doc.size()) > max_chars - total) {
      size_t take = size_t(max_chars - total);
      while (take > 0 && (uint8_t(doc[take]) & 0xC0) == 0x80) --take;
      doc = doc.substr(0, take);
    }
    total += int64_t(doc.size());
    if (doc.size() > 2 * kPiece && splitter.newline_cuttable) {
      auto cuts = cut_points(doc, kPiece);
      for (size_t i = 0; i + 1 < cuts.size(); ++i) pieces.push_back(doc.substr(cuts[i], cuts[i + 1] - cuts[i]));
    } else if (!doc.empty()) {
      pieces.push_back(doc);
    }
  }
  return pieces;
}

// Every unique chunk of the pieces as symbols (bytes at first), flat, with its frequency; len
// shrinks as merges rewrite the chunks in place.
struct Chunks {
  std::vector<uint64_t> off;
  std::vector<uint32_t> len;
  std::vector<int64_t> freq;
  std::vector<uint32_t> sym;
  size_t size() const { return off.size(); }
};

// Counts the chunks: each thread counts into its own tables, sharded by hash so that the shards
// can then be combined in parallel too. Chunks of one byte hold no pair and are skipped. The
// result is ordered by the chunks' bytes, so everything after it is independent of the thread
// count and the hash layout.
Chunks count_chunks(const std::vector<std::string_view>& pieces, const PreSplitter& splitter, int threads) {
  const size_t T = size_t(std::max(threads, 1));
  std::vector<std::vector<ChunkCounter>> local(T, std::vector<ChunkCounter>(T));
  std::vector<std::unique_ptr<SplitScratch>> scratch(T);
  parallel_for(pieces.size(), threads, [&](size_t i, int tid) {
    auto& sc = scratch[size_t(tid)];
    if (!sc) sc = std::make_unique<SplitScratch>(splitter);
    auto& mine = local[size_t(tid)];
    pre_split(*sc, pieces[i], [&](std::string_view c) {
      if (c.size() < 2) return;
      uint64_t h = hash_bytes(c.data(), c.size());
      mine[(h >> 40) % T].add(c.data(), c.size(), h, 1);
    });
  });
  std::vector<ChunkCounter> merged(T);
  parallel_for(T, threads, [&](size_t k, int) {
    for (size_t t = 0; t < T; ++t) {
      for (const auto& e : local[t][k].tab)
        if (e.p) merged[k].add(e.p, e.n, e.h, e.count);
      local[t][k] = ChunkCounter();  // free as we go
    }
  });
  local.clear();
  std::vector<const ChunkCounter::E*> uniq;
  for (auto& m : merged)
    for (const auto& e : m.tab)
      if (e.p) uniq.push_back(&e);
  std::sort(uniq.begin(), uniq.end(), [](const ChunkCounter::E* x, const ChunkCounter::E* y) {
    return std::string_view(x->p, x->n) < std::string_view(y->p, y->n);
  });
  Chunks c;
  const size_t W = uniq.size();
  c.off.resize(W), c.len.resize(W), c.freq.resize(W);
  size_t nsym = 0;
  for (size_t w = 0; w < W; ++w) {
    c.off[w] = nsym;
    c.len[w] = uint32_t(uniq[w]->n);
    c.freq[w] = int64_t(uniq[w]->count);
    nsym += uniq[w]->n;
  }
  c.sym.resize(nsym);
  for (size_t w = 0; w < W; ++w)
    for (size_t i = 0; i < c.len[w]; ++i) c.sym[c.off[w] + i] = uint8_t(uniq[w]->p[i]);
  return c;
}

// The merge learner: pair counts and the chunks holding each pair, kept current as merges
// rewrite the chunks; a max-heap with lazy deletion yields the next merge.
class Merger {
 public:
  explicit Merger(Chunks& c) : c_(c) { count_byte_pairs(); }

  // Applies the most frequent pair as symbol `id`; false when no pair is left.
  bool merge_next(uint32_t id, std::array<uint32_t, 3>& merge) {
    while (!heap_.empty()) {
      const HeapEntry top = heap_.top();
      heap_.pop();
      const uint32_t idx = uint32_t(*index_.find(PairMap::key(top.a, top.b)));
      if (stats_[idx].count != top.count || top.count <= 0) continue;  // stale
      merge = {top.a, top.b, id};
      apply(idx, top.a, top.b, id);
      return true;
    }
    return false;
  }

 private:
  // Initial pair counts and chunk lists (byte pairs only, so a dense 256x256 table).
  void count_byte_pairs() {
    std::vector<int64_t> cnt(65536, 0);
    std::vector<uint32_t> nwhere(65536, 0), last(65536, ~0u), pidx(65536, ~0u);
    auto each_pair = [&](auto fn) {
      for (size_t w = 0; w < c_.size(); ++w) {
        const uint32_t* s = &c_.sym[c_.off[w]];
        for (uint32_t i = 0; i + 1 < c_.len[w]; ++i) fn(uint32_t(w), s[i] * 256 + s[i + 1]);
      }
    };
    each_pair([&](uint32_t w, uint32_t p) {
      cnt[p] += c_.freq[w];
      if (last[p] != w) last[p] = w, ++nwhere[p];
    });
    for (uint32_t p = 0; p < 65536; ++p) {
      if (!cnt[p]) continue;
      pidx[p] = uint32_t(stats_.size());
      PairStat st;
      st.count = cnt[p];
      st.a = p >> 8;
      st.b = p & 255;
      st.where.reserve(nwhere[p]);
      stats_.push_back(std::move(st));
      index_.insert(PairMap::key(p >> 8, p & 255), pidx[p]);
    }
    std::fill(last.begin(), last.end(), ~0u);
    each_pair([&](uint32_t w, uint32_t p) {
      if (last[p] != w) last[p] = w, stats_[pidx[p]].where.push_back(w);
    });
    for (auto& st : stats_) {
      heap_.push({st.count, st.a, st.b});
      st.pushed = st.count;
    }
  }

  PairStat& stat_of(uint32_t a, uint32_t b) {
    const uint64_t k = PairMap::key(a, b);
    if (const uint64_t* v = index_.find(k)) return stats_[*v];
    index_.insert(k, stats_.size());
    PairStat st;
    st.a = a;
    st.b = b;
    stats_.push_back(std::move(st));
    return stats_.back();
  }

  PairStat& delta(uint32_t a, uint32_t b, int64_t d) {
    PairStat& st = stat_of(a, b);
    st.count += d;
    if (st.stamp != step_) {
      st.stamp = step_;
      touched_.push_back(uint32_t(&st - stats_.data()));
    }
    return st;
  }

  // Rewrites every chunk holding (a, b) with `c` and adjusts the counts of the pairs around it.
  void apply(uint32_t idx, uint32_t a, uint32_t b, uint32_t c) {
    ++step_;
    touched_.clear();
    std::vector<uint32_t> where = std::move(stats_[idx].where);
    stats_[idx].where = {};
    for (uint32_t w : where) rewrite(w, a, b, c);
    for (uint32_t i : touched_) {
      PairStat& st = stats_[i];
      if (st.count > 0 && st.count != st.pushed) {
        heap_.push({st.count, st.a, st.b});
        st.pushed = st.count;
      }
    }
  }

  void rewrite(uint32_t w, uint32_t a, uint32_t b, uint32_t c) {
    uint32_t* s = &c_.sym[c_.off[w]];
    const uint32_t n = c_.len[w];
    // Find the occurrences, left to right, non-overlapping.
    in_occ_.assign(n, 0);
    bool any = false;
    for (uint32_t i = 0; i + 1 < n;) {
      if (s[i] == a && s[i + 1] == b) {
        in_occ_[i] = in_occ_[i + 1] = 1;
        any = true;
        i += 2;
      } else {
        ++i;
      }
    }
    if (!any) return;  // stale entry: an earlier merge consumed the pair here
    const int64_t f = c_.freq[w];
    // Old pairs that touch an occurrence disappear...
    for (uint32_t i = 0; i + 1 < n; ++i)
      if (in_occ_[i] || in_occ_[i + 1]) delta(s[i], s[i + 1], -f);
    // ...rewrite in place...
    uint32_t m = 0;
    for (uint32_t i = 0; i < n;) {
      if (in_occ_[i]) {
        s[m++] = c;
        i += 2;
      } else {
        s[m++] = s[i++];
      }
    }
    c_.len[w] = m;
    // ...and the pairs that touch the new symbol appear (all other pairs are unchanged).
    for (uint32_t i = 0; i + 1 < m; ++i) {
      if (s[i] != c && s[i + 1] != c) continue;
      PairStat& st = delta(s[i], s[i + 1], +f);
      if (st.where.empty() || st.where.back() != w) st.where.push_back(w);
    }
  }

  Chunks& c_;
  std::vector<PairStat> stats_;
  PairMap index_;  // pair -> index into stats_
  std::priority_queue<HeapEntry> heap_;
  std::vector<uint32_t> touched_;
  std::vector<uint8_t> in_occ_;
  uint64_t step_ = 0;
};

// The tokenizer: bytes 0..255, merges 256.., then the special tokens.
Tokenizer assemble(std::vector<std::array<uint32_t, 3>> merges, const std::vector<std::string>& special_names) {
  TokenizerParts p;
  for (int b = 0; b < 256; ++b) p.byte_id[b] = uint32_t(b);
  const uint32_t first_special = uint32_t(256 + merges.size());
  const uint32_t n_special = uint32_t(special_names.size());
  p.bos = first_special;
  for (uint32_t k = 0; k < n_special; ++k) {
    p.specials.emplace_back(special_names[k], first_special + k);
    if (special_names[k] == "<|bos|>") p.bos = first_special + k;
  }
  p.pattern = kGpt4Pattern;
  p.merges = std::move(merges);
  p.vocab_size = first_special + n_special;
  p.kind = "bpe";
  return build_tokenizer(std::move(p), "trained tokenizer");
}

}  // namespace

Tokenizer train_bpe(const std::vector<std::string_view>& docs, const BpeTrainOptions& opt) {
  const double t0 = now_seconds();
  const bool stderr_tty = isatty(STDERR_FILENO);
  const int threads = opt.threads > 0 ? opt.threads : default_threads();
  const std::vector<std::string> special_names = special_token_names(opt);
  const uint32_t n_special = uint32_t(special_names.size());
  if (opt.vocab_size < 256 + n_special)
    fail("vocab size {} is too small: need at least 256 bytes + {} special tokens", opt.vocab_size, n_special);
  const uint32_t target_merges = opt.vocab_size - 256 - n_special;

  const PreSplitter splitter(kGpt4Pattern);
  int64_t total = 0;
  Chunks chunks = count_chunks(training_pieces(docs, opt.max_chars, splitter, total), splitter, threads);
  const double t_count = now_seconds();

  Merger merger(chunks);
  std::vector<std::array<uint32_t, 3>> merges;
  merges.reserve(target_merges);
  for (std::array<uint32_t, 3> m; merges.size() < target_merges && merger.merge_next(uint32_t(256 + merges.size()), m);) {
    merges.push_back(m);
    if (opt.verbose && merges.size() % 2000 == 0)  // redraw on a terminal, one line each in a log
      fmt::print(stderr, "{}tokenizer: {} / {} merges ({:.1f}s){}", stderr_tty ? "\r" : "", merges.size(),
                 target_merges, now_seconds() - t0, stderr_tty ? "" : "\n");
  }
  const double t_merge = now_seconds();
  if (opt.verbose) {
    fmt::print(stderr, "{}tokenizer: {} bytes of text, {} unique chunks; counting {:.2f}s, {} merges {:.2f}s\n",
               stderr_tty ? "\r" : "", total, chunks.size(), t_count - t0, merges.size(), t_merge - t_count);
    if (merges.size() < target_merges)
      fmt::print(stderr, "tokenizer: the text ran out of pairs after {} merges; vocab size is {} instead of {}\n",
                 merges.size(), 256 + merges.size() + n_special, opt.vocab_size);
  }
  return assemble(std::move(merges), special_names);
}

}  // namespace clm

// BPE trainer: pre-splits the training text on all cores into chunks counted by frequency, then
// learns merges with incremental pair counts -- every pair has a count and a list of the unique
// chunks holding it, a max-heap (lazy deletion) yields the most frequent pair, and each merge
// rewrites only the chunks that hold it, adjusting the counts of the pairs next to each merge.
// Ties go to the smaller (left id, right id), so the result depends only on the input text.
#include "tok/train.h"

#include <algorithm>
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

}  // namespace

Tokenizer train_bpe(const std::vector<std::string_view>& docs, const BpeTrainOptions& opt) {
  const double t0 = now_seconds();
  const bool stderr_tty = isatty(STDERR_FILENO);
  const int threads = opt.threads > 0 ? opt.threads : default_threads();

  // Special tokens: the caller's, then reserved ones up to 8 in all.
  std::vector<std::string> special_names = opt.special_tokens;
  if (special_names.empty()) special_names.push_back("<|bos|>");
  for (int k = 0; special_names.size() < 8; ++k) special_names.push_back(fmt::format("<|reserved_{}|>", k));
  for (size_t i = 0; i < special_names.size(); ++i) {
    if (special_names[i].empty()) fail("empty special token name");
    for (size_t j = 0; j < i; ++j)
      if (special_names[i] == special_names[j]) fail("special token {} listed twice", special_names[i]);
  }
  const uint32_t n_special = uint32_t(special_names.size());
  if (opt.vocab_size < 256 + n_special)
    fail("vocab size {} is too small: need at least 256 bytes + {} special tokens", opt.vocab_size, n_special);
  const uint32_t target_merges = opt.vocab_size - 256 - n_special;

  // 1. The training text, capped at max_chars bytes (cut at a UTF-8 boundary), in pieces of about
  //    1 MiB so that one huge document still spreads over all threads.
  PreSplitter splitter(kGpt4Pattern);
  std::vector<std::string_view> pieces;
  int64_t total = 0;
  const size_t kPiece = size_t(1) << 20;
  for (std::string_view doc : docs) {
    if (total >= opt.max_chars) break;
    if (int64_t(doc.size()) > opt.max_chars - total) {
      size_t take = size_t(opt.max_chars - total);
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

  // 2. Count chunks: each thread counts into its own tables, sharded by hash so that the shards can
  //    then be combined in parallel too. Chunks of one byte hold no pair and are skipped.
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
  // Order unique chunks by their bytes so that everything after this point is independent of the
  // thread count and hash layout.
  std::vector<const ChunkCounter::E*> uniq;
  for (auto& m : merged)
    for (const auto& e : m.tab)
      if (e.p) uniq.push_back(&e);
  std::sort(uniq.begin(), uniq.end(), [](const ChunkCounter::E* x, const ChunkCounter::E* y) {
    return std::string_view(x->p, x->n) < std::string_view(y->p, y->n);
  });
  const double t_count = now_seconds();

  // 3. Symbols of every unique chunk, flat; len shrinks as merges apply.
  const size_t W = uniq.size();
  std::vector<uint64_t> off(W);
  std::vector<uint32_t> len(W);
  std::vector<int64_t> freq(W);
  size_t nsym = 0;
  for (size_t w = 0; w < W; ++w) {
    off[w] = nsym;
    len[w] = uint32_t(uniq[w]->n);
    freq[w] = int64_t(uniq[w]->count);
    nsym += uniq[w]->n;
  }
  std::vector<uint32_t> sym(nsym);
  for (size_t w = 0; w < W; ++w)
    for (size_t i = 0; i < len[w]; ++i) sym[off[w] + i] = uint8_t(uniq[w]->p[i]);
  uniq.clear();
  merged.clear();

  // 4. Initial pair counts and chunk lists (byte pairs only, so a dense 256x256 table).
  std::vector<PairStat> stats;
  PairMap index;  // pair -> index into stats
  {
    std::vector<int64_t> cnt(65536, 0);
    std::vector<uint32_t> nwhere(65536, 0);
    std::vector<uint32_t> last(65536, ~0u);
    for (size_t w = 0; w < W; ++w) {
      const uint32_t* s = &sym[off[w]];
      for (uint32_t i = 0; i + 1 < len[w]; ++i) {
        uint32_t p = s[i] * 256 + s[i + 1];
        cnt[p] += freq[w];
        if (last[p] != w) {
          last[p] = uint32_t(w);
          ++nwhere[p];
        }
      }
    }
    std::vector<uint32_t> pidx(65536, ~0u);
    for (uint32_t p = 0; p < 65536; ++p) {
      if (!cnt[p]) continue;
      pidx[p] = uint32_t(stats.size());
      PairStat st;
      st.count = cnt[p];
      st.a = p >> 8;
      st.b = p & 255;
      st.where.reserve(nwhere[p]);
      stats.push_back(std::move(st));
      index.insert(PairMap::key(p >> 8, p & 255), pidx[p]);
    }
    std::fill(last.begin(), last.end(), ~0u);
    for (size_t w = 0; w < W; ++w) {
      const uint32_t* s = &sym[off[w]];
      for (uint32_t i = 0; i + 1 < len[w]; ++i) {
        uint32_t p = s[i] * 256 + s[i + 1];
        if (last[p] != w) {
          last[p] = uint32_t(w);
          stats[pidx[p]].where.push_back(uint32_t(w));
        }
      }
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (auto& st : stats) {
    heap.push({st.count, st.a, st.b});
    st.pushed = st.count;
  }

  // 5. Merge loop.
  std::vector<std::array<uint32_t, 3>> merges;
  merges.reserve(target_merges);
  std::vector<uint32_t> touched;
  std::vector<uint8_t> in_occ;
  uint64_t step = 0;
  auto stat_of = [&](uint32_t a, uint32_t b) -> PairStat& {
    uint64_t k = PairMap::key(a, b);
    if (const uint64_t* v = index.find(k)) return stats[*v];
    index.insert(k, stats.size());
    PairStat st;
    st.a = a;
    st.b = b;
    stats.push_back(std::move(st));
    return stats.back();
  };
  auto delta = [&](uint32_t a, uint32_t b, int64_t d) -> PairStat& {
    PairStat& st = stat_of(a, b);
    st.count += d;
    if (st.stamp != step) {
      st.stamp = step;
      touched.push_back(uint32_t(&st - stats.data()));
    }
    return st;
  };
  while (merges.size() < target_merges && !heap.empty()) {
    HeapEntry top = heap.top();
    heap.pop();
    uint32_t top_idx = uint32_t(*index.find(PairMap::key(top.a, top.b)));
    if (stats[top_idx].count != top.count || top.count <= 0) continue;  // stale
    const uint32_t a = top.a, b = top.b, c = uint32_t(256 + merges.size());
    merges.push_back({a, b, c});
    ++step;
    touched.clear();
    std::vector<uint32_t> where = std::move(stats[top_idx].where);
    stats[top_idx].where = {};
    for (uint32_t w : where) {
      uint32_t* s = &sym[off[w]];
      const uint32_t n = len[w];
      // Find the occurrences, left to right, non-overlapping.
      in_occ.assign(n, 0);
      bool any = false;
      for (uint32_t i = 0; i + 1 < n;) {
        if (s[i] == a && s[i + 1] == b) {
          in_occ[i] = in_occ[i + 1] = 1;
          any = true;
          i += 2;
        } else {
          ++i;
        }
      }
      if (!any) continue;  // stale entry: an earlier merge consumed the pair here
      const int64_t f = freq[w];
      // Old pairs that touch an occurrence disappear...
      for (uint32_t i = 0; i + 1 < n; ++i)
        if (in_occ[i] || in_occ[i + 1]) delta(s[i], s[i + 1], -f);
      // ...rewrite in place...
      uint32_t m = 0;
      for (uint32_t i = 0; i < n;) {
        if (in_occ[i]) {
          s[m++] = c;
          i += 2;
        } else {
          s[m++] = s[i++];
        }
      }
      len[w] = m;
      // ...and the pairs that touch the new symbol appear (all other pairs are unchanged).
      for (uint32_t i = 0; i + 1 < m; ++i) {
        if (s[i] != c && s[i + 1] != c) continue;
        PairStat& st = delta(s[i], s[i + 1], +f);
        if (st.where.empty() || st.where.back() != w) st.where.push_back(w);
      }
    }
    for (uint32_t idx : touched) {
      PairStat& st = stats[idx];
      if (st.count > 0 && st.count != st.pushed) {
        heap.push({st.count, st.a, st.b});
        st.pushed = st.count;
      }
    }
    if (opt.verbose && merges.size() % 2000 == 0)  // redraw on a terminal, one line each in a log
      fmt::print(stderr, "{}tokenizer: {} / {} merges ({:.1f}s){}", stderr_tty ? "\r" : "", merges.size(),
                 target_merges, now_seconds() - t0, stderr_tty ? "" : "\n");
  }
  const double t_merge = now_seconds();
  if (opt.verbose) {
    fmt::print(stderr, "{}tokenizer: {} bytes of text, {} unique chunks; counting {:.2f}s, {} merges {:.2f}s\n",
               stderr_tty ? "\r" : "", total, W, t_count - t0, merges.size(), t_merge - t_count);
    if (merges.size() < target_merges)
      fmt::print(stderr, "tokenizer: the text ran out of pairs after {} merges; vocab size is {} instead of {}\n",
                 merges.size(), 256 + merges.size() + n_special, opt.vocab_size);
  }

  // 6. The tokenizer: bytes 0..255, merges 256.., then the special tokens.
  TokenizerParts p;
  for (int b = 0; b < 256; ++b) p.byte_id[b] = uint32_t(b);
  const uint32_t first_special = uint32_t(256 + merges.size());
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

}  // namespace clm

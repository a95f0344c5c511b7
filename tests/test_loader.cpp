// Tests for the data loader on synthetic shards: every row starts with BOS, rows are exactly the
// documented packing, determinism, epochs, rank partitioning, exact resume, val file order.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/common.h"
#include "data/dataset.h"
#include "data/loader.h"

using namespace clm;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kBos = 0, kVocab = 70000;  // 4-byte shards for "train", 2-byte not needed here

// A dataset whose tokens encode their position: document d's k-th token is 1 + (d*1000 + k) % 69999,
// so every row can be checked against the stream. Documents have varied lengths (some longer
// than a row), split over several shards (a shard never splits a document).
struct Synthetic {
  fs::path dir;
  std::vector<uint32_t> stream[2];  // train, val
};

Synthetic make_dataset(const std::string& name, int train_docs = 300, int val_docs = 40) {
  Synthetic s;
  s.dir = fs::temp_directory_path() / fmt::format("clocklm_{}_{}", name, getpid());
  fs::remove_all(s.dir);
  fs::create_directories(s.dir);
  nlohmann::json manifest = {{"tokenizer", {{"bos_id", kBos}, {"vocab_size", kVocab}, {"hash", "synthetic"}}}};
  Rng rng(7);
  const char* names[2] = {"train", "val"};
  for (int split = 0; split < 2; ++split) {
    int ndocs = split == 0 ? train_docs : val_docs;
    nlohmann::json shards = nlohmann::json::array();
    std::vector<uint32_t> cur;
    int shard_no = 0;
    auto flush = [&] {
      std::string file = fmt::format("{}_{:06d}.bin", names[split], shard_no++);
      write_shard((s.dir / file).string(), cur, kVocab);
      shards.push_back({{"file", file}, {"tokens", cur.size()}});
      s.stream[split].insert(s.stream[split].end(), cur.begin(), cur.end());
      cur.clear();
    };
    for (int d = 0; d < ndocs; ++d) {
      int len = 1 + int(rng.next() % 90);
      if (d % 17 == 0) len = 200 + int(rng.next() % 300);  // longer than a row
      cur.push_back(kBos);
      for (int k = 0; k < len; ++k) cur.push_back(1 + uint32_t((d * 1000 + k + split * 7) % (kVocab - 1)));
      if (cur.size() > 3000) flush();
    }
    if (!cur.empty()) flush();
    manifest["splits"][names[split]] = {{"shards", shards}};
  }
  atomic_write((s.dir / "manifest.json").string(), manifest.dump(2));
  return s;
}

// The documented packing, written independently: walk the stream; a row starting at a BOS takes
// T+1 tokens, a row starting inside a document is BOS + T tokens; the incomplete tail is dropped.
std::vector<std::vector<int32_t>> reference_rows(const std::vector<uint32_t>& st, int T) {
  std::vector<std::vector<int32_t>> rows;
  size_t p = 0;
  while (p < st.size()) {
    std::vector<int32_t> row;
    if (st[p] != kBos) row.push_back(int32_t(kBos));
    size_t need = size_t(T + 1) - row.size();
    if (p + need > st.size()) break;
    for (size_t i = 0; i < need; ++i) row.push_back(int32_t(st[p + i]));
    p += need;
    rows.push_back(row);
  }
  return rows;
}

std::vector<std::vector<int32_t>> take_rows(DataLoader& dl, int B, int T, int batches) {
  std::vector<std::vector<int32_t>> rows;
  std::vector<int32_t> x(size_t(B) * T), y(size_t(B) * T);
  for (int i = 0; i < batches; ++i) {
    if (!dl.next(x.data(), y.data())) break;
    for (int b = 0; b < B; ++b) {
      std::vector<int32_t> row(x.begin() + b * T, x.begin() + (b + 1) * T);
      row.push_back(y[size_t(b) * T + T - 1]);
      for (int t = 0; t + 1 < T; ++t) EXPECT_EQ(y[size_t(b) * T + t], x[size_t(b) * T + t + 1]);
      rows.push_back(row);
    }
  }
  return rows;
}

LoaderOptions opts(const Synthetic& s, const std::string& split, int B, int T) {
  LoaderOptions o;
  o.dir = s.dir.string();
  o.split = split;
  o.B = B;
  o.T = T;
  if (split == "val") {
    o.shuffle = false;
    o.loop = false;
  }
  return o;
}

}  // namespace

TEST(DataLoader, ValIsFileOrderAndMatchesDocumentedPacking) {
  auto s = make_dataset("loader_val");
  const int T = 64;
  auto want = reference_rows(s.stream[1], T);
  for (bool prefetch : {true, false}) {
    auto o = opts(s, "val", 1, T);
    o.prefetch = prefetch;
    DataLoader dl(o);
    EXPECT_EQ(dl.rows(), want.size());
    EXPECT_EQ(dl.tokens(), s.stream[1].size());
    auto got = take_rows(dl, 1, T, 1 << 20);
    EXPECT_EQ(got, want);
    std::vector<int32_t> x(T), y(T);
    EXPECT_FALSE(dl.next(x.data(), y.data()));  // stays exhausted
  }
  // B=3: only full batches
  DataLoader dl3(opts(s, "val", 3, T));
  auto got3 = take_rows(dl3, 3, T, 1 << 20);
  EXPECT_EQ(got3.size(), want.size() / 3 * 3);
  EXPECT_TRUE(std::equal(got3.begin(), got3.end(), want.begin()));
  fs::remove_all(s.dir);
}

TEST(DataLoader, TrainRowsStartWithBosAndEpochsArePermutations) {
  auto s = make_dataset("loader_train");
  const int T = 32, B = 4;
  auto want = reference_rows(s.stream[0], T);
  std::multiset<std::vector<int32_t>> all(want.begin(), want.end());
  DataLoader dl(opts(s, "train", B, T));
  ASSERT_EQ(dl.rows(), want.size());
  size_t R = want.size();
  auto rows = take_rows(dl, B, T, int((3 * R + B - 1) / B));  // three epochs (batches may straddle)
  for (auto& r : rows) ASSERT_EQ(r[0], int32_t(kBos));
  for (int e = 0; e < 3; ++e) {
    std::multiset<std::vector<int32_t>> ep(rows.begin() + e * R, rows.begin() + (e + 1) * R);
    EXPECT_EQ(ep, all) << "epoch " << e;
  }
  EXPECT_NE(std::vector(rows.begin(), rows.begin() + R), want) << "train order is shuffled";
  EXPECT_NE(std::vector(rows.begin(), rows.begin() + R), std::vector(rows.begin() + R, rows.begin() + 2 * R))
      << "each epoch has its own order";
  fs::remove_all(s.dir);
}

TEST(DataLoader, DeterministicPerSeed) {
  auto s = make_dataset("loader_det");
  auto o = opts(s, "train", 2, 48);
  DataLoader a(o), b(o);
  auto ra = take_rows(a, 2, 48, 200), rb = take_rows(b, 2, 48, 200);
  EXPECT_EQ(ra, rb);
  o.seed = 99;
  DataLoader c(o);
  EXPECT_NE(take_rows(c, 2, 48, 200), ra);
  o.prefetch = false;
  o.seed = 1337;
  DataLoader d(o);
  EXPECT_EQ(take_rows(d, 2, 48, 200), ra);
  fs::remove_all(s.dir);
}

TEST(DataLoader, RanksPartitionTheData) {
  auto s = make_dataset("loader_ranks");
  const int T = 40, world = 3;
  auto want = reference_rows(s.stream[0], T);
  size_t R = want.size();
  for (bool shuffle : {true, false}) {
    std::multiset<std::vector<int32_t>> seen;
    std::vector<std::vector<std::vector<int32_t>>> per_rank;
    for (int r = 0; r < world; ++r) {
      auto o = opts(s, "train", 1, T);
      o.rank = r;
      o.world = world;
      o.shuffle = shuffle;
      o.loop = false;
      DataLoader dl(o);
      auto rows = take_rows(dl, 1, T, 1 << 20);
      EXPECT_GE(rows.size(), R / world);
      seen.insert(rows.begin(), rows.end());
      per_rank.push_back(rows);
    }
    EXPECT_EQ(seen, std::multiset<std::vector<int32_t>>(want.begin(), want.end())) << "shuffle=" << shuffle;
    // Looping ranks: the first R rows handed out across ranks (round-robin) are one epoch.
    std::multiset<std::vector<int32_t>> first_epoch;
    std::vector<std::unique_ptr<DataLoader>> dls;
    for (int r = 0; r < world; ++r) {
      auto o = opts(s, "train", 1, T);
      o.rank = r;
      o.world = world;
      o.shuffle = shuffle;
      dls.push_back(std::make_unique<DataLoader>(o));
    }
    std::vector<int32_t> x(T), y(T);
    for (size_t j = 0; j < R; ++j) {
      ASSERT_TRUE(dls[j % world]->next(x.data(), y.data()));
      std::vector<int32_t> row(x);
      row.push_back(y[T - 1]);
      first_epoch.insert(row);
    }
    EXPECT_EQ(first_epoch, std::multiset<std::vector<int32_t>>(want.begin(), want.end()));
  }
  auto bad = opts(s, "train", 1, T);
  bad.rank = 3;
  bad.world = 3;
  EXPECT_THROW(DataLoader{bad}, Error);
  fs::remove_all(s.dir);
}

TEST(DataLoader, ResumeYieldsTheSameBatches) {
  auto s = make_dataset("loader_resume");
  const int B = 3, T = 50;
  auto o = opts(s, "train", B, T);
  DataLoader a(o);
  take_rows(a, B, T, 57);  // into the second epoch
  nlohmann::json st = a.state();
  auto expected = take_rows(a, B, T, 120);
  // a fresh loader restored from the saved JSON (round-tripped through text, as a checkpoint is)
  DataLoader b(o);
  take_rows(b, B, T, 5);  // a prefetching loader that already ran ahead
  b.restore(nlohmann::json::parse(st.dump()));
  EXPECT_EQ(take_rows(b, B, T, 120), expected);
  // restore into a loader of another shape is refused
  auto o2 = o;
  o2.T = 51;
  DataLoader c(o2);
  EXPECT_THROW(c.restore(st), Error);
  auto o3 = o;
  o3.seed = 5;
  DataLoader d(o3);
  EXPECT_THROW(d.restore(st), Error);
  EXPECT_THROW(d.restore(nlohmann::json{{"row", 1}}), Error);
  fs::remove_all(s.dir);
}

TEST(DataLoader, ErrorsAreClear) {
  auto s = make_dataset("loader_err", 2, 1);
  auto o = opts(s, "train", 1, 100000);
  EXPECT_THROW(DataLoader{o}, Error);  // fewer tokens than one row
  o.T = 8;
  o.split = "test";
  EXPECT_THROW(DataLoader{o}, Error);
  o.split = "train";
  o.dir = (s.dir / "nope").string();
  EXPECT_THROW(DataLoader{o}, Error);
  fs::remove_all(s.dir);
}

// A token id at or past the vocabulary (a corrupt shard) would index past the embedding table; the
// loader refuses it with a message naming the shard.
TEST(DataLoader, TokenBeyondTheVocabularyIsRefused) {
  auto s = make_dataset("loader_badtok", 2, 1);
  std::string shard = (s.dir / "val_000000.bin").string();
  std::string bytes = read_file(shard);
  uint32_t bad = kVocab + 5;
  std::memcpy(bytes.data() + kShardHeaderBytes + 4 * 3, &bad, 4);
  atomic_write(shard, bytes);
  auto o = opts(s, "val", 1, 8);
  o.prefetch = false;
  DataLoader dl(o);
  std::vector<int32_t> in(8), tg(8);
  try {
    dl.next(in.data(), tg.data());
    FAIL() << "a token beyond the vocabulary was loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("val_000000.bin is corrupt"), std::string::npos) << e.what();
  }
  fs::remove_all(s.dir);
}

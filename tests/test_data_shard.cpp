// Tests for token shards: round trips at both widths, and refusal of corrupt files (bad magic,
// unknown version, bad width, truncated, padded) with an error naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/common.h"
#include "data/dataset.h"

#include "test_data_util.h"

using namespace clm;
namespace fs = std::filesystem;

namespace {
using data_test::temp_dir;
using data_test::write_raw;
void expect_refused(const fs::path& p, const std::string& what) {
  try {
    Shard::open(p.string());
    ADD_FAILURE() << "opened a bad shard: " << what;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}
}  // namespace

TEST(DataShard, RoundTripBothWidths) {
  auto d = temp_dir("shard_rt");
  std::vector<uint32_t> small = {0, 1, 65535, 42, 7};
  write_shard((d / "a.bin").string(), small, 65536);
  Shard a = Shard::open((d / "a.bin").string());
  EXPECT_EQ(a.width, 2u);
  EXPECT_EQ(a.vocab_size, 65536u);
  ASSERT_EQ(a.size(), small.size());
  for (size_t i = 0; i < small.size(); ++i) EXPECT_EQ(a.at(i), small[i]);
  EXPECT_EQ(fs::file_size(d / "a.bin"), 32 + 2 * small.size());

  std::vector<uint32_t> big = {0, 65536, 100000, 3};
  write_shard((d / "b.bin").string(), big, 100001);
  Shard b = Shard::open((d / "b.bin").string());
  EXPECT_EQ(b.width, 4u);
  ASSERT_EQ(b.size(), big.size());
  for (size_t i = 0; i < big.size(); ++i) EXPECT_EQ(b.at(i), big[i]);

  write_shard((d / "empty.bin").string(), {}, 50);
  EXPECT_EQ(Shard::open((d / "empty.bin").string()).size(), 0u);

  EXPECT_THROW(write_shard((d / "c.bin").string(), {5, 50}, 50), Error);  // id out of range
  EXPECT_FALSE(fs::exists(d / "c.bin"));
  for (auto& e : fs::directory_iterator(d))  // no temp files left behind
    EXPECT_NE(e.path().filename().string()[0], '.') << e.path();
  fs::remove_all(d);
}

TEST(DataShard, CorruptShardsAreRefused) {
  auto d = temp_dir("shard_bad");
  std::vector<uint32_t> toks(100);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = uint32_t(i);
  auto good = d / "good.bin";
  write_shard(good.string(), toks, 1000);
  std::string bytes = read_file(good.string());

  std::string m = bytes;
  m[0] = 'X';
  write_raw(d / "magic.bin", m);
  expect_refused(d / "magic.bin", "bad magic");

  std::string v = bytes;
  uint32_t ver = 9;
  std::memcpy(v.data() + 8, &ver, 4);
  write_raw(d / "version.bin", v);
  expect_refused(d / "version.bin", "version 9");

  std::string w = bytes;
  uint32_t width = 3;
  std::memcpy(w.data() + 12, &width, 4);
  write_raw(d / "width.bin", w);
  expect_refused(d / "width.bin", "width 3");

  write_raw(d / "trunc.bin", bytes.substr(0, bytes.size() - 7));
  expect_refused(d / "trunc.bin", "truncated");
  write_raw(d / "pad.bin", bytes + "xx");
  expect_refused(d / "pad.bin", "padded");
  write_raw(d / "tiny.bin", "CLMT");
  expect_refused(d / "tiny.bin", "not a clocklm token shard");
  expect_refused(d / "missing.bin", "cannot open");

  std::string text = "hello, this is a text file and not a shard at all";
  write_raw(d / "text.bin", text);
  expect_refused(d / "text.bin", "bad magic");
  fs::remove_all(d);
}

TEST(DataShard, DatasetInfoErrors) {
  auto d = temp_dir("shard_info");
  EXPECT_THROW(read_dataset_info((d / "nope").string()), Error);
  EXPECT_THROW(read_dataset_info(d.string()), Error);  // no manifest
  write_raw(d / "manifest.json", "{not json");
  EXPECT_THROW(read_dataset_info(d.string()), Error);
  write_raw(d / "manifest.json",
            R"({"tokenizer": {"bos_id": 0, "vocab_size": 10, "hash": "x"},
                "splits": {"train": {"shards": [{"file": "train_000000.bin"}]}, "val": {"shards": []}}})");
  EXPECT_THROW(read_dataset_info(d.string()), Error);  // shard missing
  write_shard((d / "train_000000.bin").string(), {0, 1, 2}, 10);
  DatasetInfo info = read_dataset_info(d.string());
  EXPECT_EQ(info.train_shards.size(), 1u);
  EXPECT_EQ(info.vocab_size, 10u);
  fs::remove_all(d);
}

// A header claiming more tokens than the file holds (up to 2^64-1) is refused from the file size
// alone, before anything is read or allocated; so is a vocabulary that does not fit the width.
TEST(DataShard, AbsurdHeaderSizesAreRefused) {
  auto d = temp_dir("shard_absurd");
  write_shard((d / "a.bin").string(), {1, 2, 3}, 10);
  std::string bytes = read_file((d / "a.bin").string());
  for (uint64_t n : {uint64_t(4), uint64_t(1) << 62, ~uint64_t(0)}) {
    std::string b = bytes;
    std::memcpy(b.data() + 16, &n, 8);
    write_raw(d / "big.bin", b);
    expect_refused(d / "big.bin", "truncated");
  }
  std::string b = bytes;
  uint32_t vocab = 100000;  // needs 4-byte tokens, but the header says 2
  std::memcpy(b.data() + 24, &vocab, 4);
  write_raw(d / "vocab.bin", b);
  expect_refused(d / "vocab.bin", "does not fit its token width");
  EXPECT_THROW(parse_shard_header(bytes.data(), 31, "short"), Error);
  fs::remove_all(d);
}

// The manifest names shards inside its folder only, and a BOS id inside the vocabulary.
TEST(DataShard, ManifestShardNamesAndBosAreChecked) {
  auto manifest = [](const std::string& file, int bos) {
    return fmt::format(R"({{"tokenizer": {{"bos_id": {}, "vocab_size": 10}},
                           "splits": {{"train": {{"shards": [{{"file": "{}"}}]}}, "val": {{"shards": []}}}}}})",
                       bos, file);
  };
  EXPECT_EQ(parse_dataset_manifest(manifest("train_000000.bin", 0), "/d").train_shards.at(0), "/d/train_000000.bin");
  for (const char* bad : {"../secret.bin", "/etc/passwd", "..", "sub/train.bin"})
    EXPECT_THROW(parse_dataset_manifest(manifest(bad, 0), "/d"), Error) << bad;
  EXPECT_THROW(parse_dataset_manifest(manifest("t.bin", 10), "/d"), Error);
  EXPECT_THROW(parse_dataset_manifest(R"({"tokenizer": {"bos_id": -1, "vocab_size": 10}})", "/d"), Error);
}

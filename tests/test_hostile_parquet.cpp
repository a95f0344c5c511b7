// Hostile Parquet input: decompression bombs built at test time (test_parquet_bomb_util.h) are
// refused by the real commands that read Parquet (`clocklm data count`, `clocklm prepare`,
// `clocklm tokenizer train`) with a one-line error, a non-zero exit, under 1 GiB and 10 s, leaving
// the input untouched; and the budget arithmetic that refuses them is checked on its own.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "core/common.h"
#include "data/parquet.h"
#include "data/parquet_budget.h"
#include "test_cli_util.h"
#include "test_data_util.h"
#include "test_hostile_util.h"
#include "test_parquet_bomb_util.h"

using namespace clm;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kDeltaValues = int64_t(1) << 25;     // 33.5M empty values
constexpr int64_t kDictionaryRun = 60'000'000;         // references to one 1 MiB entry: 63 TB of text

struct Bomb {
  std::string name;
  std::string bytes;
  std::string expect;  // part of the refusal
};

std::vector<Bomb> bombs() {
  return {
      {"refused-bomb-delta-byte-array.parquet", bomb::delta_bomb(bomb::kDeltaByteArray, kDeltaValues), "decompression bomb"},
      {"refused-bomb-delta-length.parquet", bomb::delta_bomb(bomb::kDeltaLength, kDeltaValues), "decompression bomb"},
      {"refused-bomb-shared-chunk.parquet", bomb::delta_bomb(bomb::kDeltaByteArray, kDeltaValues, 3), "overlapping"},
      {"refused-bomb-dictionary-rle.parquet", bomb::dictionary_bomb(1u << 20, kDictionaryRun), "decompression bomb"},
  };
}

// Runs `clocklm ARGS` on the bomb in a folder of its own and checks the refusal and that the
// folder is as it was.
void expect_refused(const Bomb& b, const std::string& args_before_input, const std::string& env = "") {
  fs::path d = data_test::temp_dir("hostile_parquet");
  fs::create_directories(d / "in");
  const fs::path f = d / "in" / b.name;
  hostile::write_file(f, b.bytes);
  const auto before = hostile::snapshot(d / "in");
  hostile::Outcome o = hostile::run_limited(env + " " + cli_test::clocklm_binary() + " " + args_before_input +
                                            " --input " + f.string());
  EXPECT_CLEAN_REFUSAL(o);
  EXPECT_NE(o.out.find(b.name), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(b.expect), std::string::npos) << o.out;
  EXPECT_EQ(o.out.rfind("clocklm: error: ", 0), 0u) << o.out;
  EXPECT_EQ(hostile::snapshot(d / "in"), before);
  std::printf("  %s, %s: exit %d, %ld MiB peak, %.2f s\n", b.name.c_str(), args_before_input.c_str(), o.exit_code,
              o.peak_rss_mib, o.seconds);
  fs::remove_all(d);
}

}  // namespace

TEST(HostileParquet, BombsAreSmall) {
  for (const Bomb& b : bombs()) EXPECT_LT(b.bytes.size(), 2048u) << b.name;
}

TEST(HostileParquet, DataCountRefusesBombs) {
  for (const Bomb& b : bombs()) expect_refused(b, "data count");
}

TEST(HostileParquet, PrepareRefusesBombs) {
  for (const Bomb& b : bombs()) {
    fs::path out = data_test::temp_dir("hostile_parquet_out") / "ds";
    expect_refused(b, "prepare --quiet --vocab-size 300 --out " + out.string());
    EXPECT_FALSE(fs::exists(out));
  }
}

TEST(HostileParquet, TokenizerTrainRefusesBombs) {
  fs::path out = data_test::temp_dir("hostile_parquet_tok") / "tok.json";
  for (const Bomb& b : bombs()) expect_refused(b, "tokenizer train --vocab-size 300 --out " + out.string());
}

// The library refuses them too, in whichever order the row groups are read, and quickly.
TEST(HostileParquet, ReaderRefusesBombsInProcess) {
  for (const Bomb& b : bombs()) {
    const double t0 = now_seconds();
    try {
      auto f = ParquetFile::from_memory(b.bytes, b.name, "text");
      for (size_t g = 0; g < f->row_groups(); ++g) f->read_row_group(g);
      ADD_FAILURE() << b.name << " was read";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.expect), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
    EXPECT_LT(now_seconds() - t0, 2.0) << b.name;
  }
}

// Below the floor of the expansion rule a small file still decodes: the rule refuses only what no
// real shard does.
TEST(HostileParquet, SmallExpansionsAreRead) {
  std::string dict = bomb::dictionary_bomb(1u << 20, 40);  // 40 MiB of text from ~1 KB
  auto f = ParquetFile::from_memory(dict, "dict.parquet", "text");
  TextBatch b = f->read_row_group(0);
  ASSERT_EQ(b.docs.size(), 40u);
  EXPECT_EQ(b.docs[39].size(), size_t(1) << 20);
  std::string delta = bomb::delta_bomb(bomb::kDeltaByteArray, 100000);
  EXPECT_EQ(ParquetFile::from_memory(delta, "delta.parquet", "text")->read_row_group(0).docs.size(), 100000u);
}

TEST(HostileParquet, BudgetArithmetic) {
  ParquetLimits l;
  const uint64_t MiB = uint64_t(1) << 20;
  EXPECT_EQ(ratio_allowance(l, 0), 64 * MiB);               // the floor
  EXPECT_EQ(ratio_allowance(l, 1000), 64 * MiB);
  EXPECT_EQ(ratio_allowance(l, 1 * MiB), 1000 * MiB);       // 1000 times
  EXPECT_EQ(ratio_allowance(l, UINT64_MAX / 2), UINT64_MAX);  // saturates
  l.max_ratio = 0;
  EXPECT_EQ(ratio_allowance(l, 0), UINT64_MAX);             // no rule

  const std::string path = "x.parquet";
  ParquetLimits d;
  FileBudget file;
  {
    // 1 MiB stored: bounded by the row-group limit (256 MiB), not the ratio (1000 MiB).
    RowGroupBudget b(d, {&path, 3, 1 * MiB, 100 * MiB}, &file, nullptr, 0);
    b.charge_memory(200 * MiB);
    b.charge_text(56 * MiB);
    EXPECT_EQ(b.used(), 256 * MiB);
    EXPECT_EQ(b.memory(), 200 * MiB);
    try {
      b.charge_text(1);
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("x.parquet: row group 3 decodes to more than 256 MiB"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(b.check(UINT64_MAX), Error);  // no overflow
  }
  EXPECT_EQ(file.used(), 256 * MiB);  // the row group's bytes count for the file when it is done
  {
    // 1 KB stored in a 2 KB file: the expansion rule's floor binds.
    FileBudget small;
    RowGroupBudget b(d, {&path, 0, 1024, 2048}, &small, nullptr, 0);
    b.charge_memory(64 * MiB);
    try {
      b.charge_memory(1);
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("x.parquet: row group 0 looks like a decompression bomb"), std::string::npos)
          << e.what();
    }
  }
  {
    // The file's total: row groups each within bounds, the file past its own.
    ParquetLimits f;
    f.max_file_bytes = 300 * MiB;
    FileBudget total;
    { RowGroupBudget b(f, {&path, 0, 100 * MiB, 1000 * MiB}, &total, nullptr, 0); b.charge_memory(200 * MiB); }
    RowGroupBudget b(f, {&path, 1, 100 * MiB, 1000 * MiB}, &total, nullptr, 1);
    b.charge_memory(100 * MiB);
    try {
      b.charge_memory(1);
      ADD_FAILURE();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("row group 1 takes the file past 300 MiB"), std::string::npos) << e.what();
    }
  }
}

// The oldest row group never waits for memory; a younger one waits until an older one is
// handed on, and wakes with an error when the reader stops.
TEST(HostileParquet, InFlightBudgetWaitsAndStops) {
  InFlightBudget f(100);
  f.take(0, 80);
  f.take(0, 80);  // the oldest goes past the cap
  bool taken = false;
  std::thread t([&] { f.take(1, 50), taken = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(taken);
  f.release(0, 160);
  t.join();
  EXPECT_TRUE(taken);
  bool threw = false;
  std::thread u([&] {
    try {
      f.take(2, 100);
    } catch (const Error&) {
      threw = true;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  f.stop();
  u.join();
  EXPECT_TRUE(threw);
}

// With an in-flight limit smaller than one row group, decoders ahead wait their turn: every
// document still arrives in order, and stopping early does not hang on a waiting decoder.
TEST(HostileParquet, InFlightLimitWaitsWithoutDeadlock) {
  fs::path d = data_test::temp_dir("hostile_parquet_flight");
  std::vector<std::string> files;
  for (int i = 0; i < 5; ++i) {
    files.push_back((d / fmt::format("{}.parquet", i)).string());
    hostile::write_file(files.back(), bomb::delta_bomb(bomb::kDeltaByteArray, 50000));
  }
  ParquetLimits l;
  l.max_in_flight_bytes = 1;
  CorpusStats st;
  int64_t docs = 0;
  EXPECT_TRUE(for_each_parquet_document(files, "text", [&](std::string_view) { return ++docs, true; }, st, 4, l));
  EXPECT_EQ(docs, 5 * 50000);
  CorpusStats st2;
  EXPECT_FALSE(for_each_parquet_document(files, "text", [](std::string_view) { return false; }, st2, 4, l));
  fs::remove_all(d);
}

TEST(HostileParquet, LimitOverridesAreChecked) {
  setenv("CLOCKLM_PARQUET_MAX_ROW_GROUP_MB", "512", 1);
  setenv("CLOCKLM_PARQUET_MAX_RATIO", "0", 1);
  ParquetLimits l = ParquetLimits::from_env();
  EXPECT_EQ(l.max_row_group_bytes, uint64_t(512) << 20);
  EXPECT_EQ(l.max_ratio, 0);
  setenv("CLOCKLM_PARQUET_MAX_ROW_GROUP_MB", "lots", 1);
  EXPECT_THROW(ParquetLimits::from_env(), Error);
  unsetenv("CLOCKLM_PARQUET_MAX_ROW_GROUP_MB");
  unsetenv("CLOCKLM_PARQUET_MAX_RATIO");

  // Without the ratio rule the row-group limit still refuses the bomb, naming its variable.
  Bomb b{"refused-bomb-dictionary-rle.parquet", bomb::dictionary_bomb(1u << 20, kDictionaryRun), "MAX_ROW_GROUP_MB"};
  expect_refused(b, "data count", "CLOCKLM_PARQUET_MAX_RATIO=0");
}

// The fuzz seeds of bomb shapes are these builders' output: CLOCKLM_WRITE_SEEDS=1 rewrites them.
TEST(HostileParquet, FuzzSeedsAreTheBombs) {
  const fs::path dir = fs::path(CLOCKLM_SOURCE_DIR) / "fuzz" / "corpus" / "fuzz_parquet";
  const char* w = std::getenv("CLOCKLM_WRITE_SEEDS");
  for (const Bomb& b : bombs()) {
    if (w && std::string(w) == "1") hostile::write_file(dir / b.name, b.bytes);
    EXPECT_EQ(read_file((dir / b.name).string()), b.bytes) << b.name << " (CLOCKLM_WRITE_SEEDS=1 rewrites it)";
  }
}

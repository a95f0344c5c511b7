// Tests for core utilities: durations, atomic writes, RNG determinism.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <unistd.h>

#include "core/common.h"

using namespace clm;

TEST(Common, ParseDuration) {
  EXPECT_DOUBLE_EQ(parse_duration("90"), 90);
  EXPECT_DOUBLE_EQ(parse_duration("90s"), 90);
  EXPECT_DOUBLE_EQ(parse_duration("30m"), 1800);
  EXPECT_DOUBLE_EQ(parse_duration("1.5h"), 5400);
  EXPECT_THROW(parse_duration("-5m"), Error);
  EXPECT_THROW(parse_duration("abc"), Error);
  EXPECT_THROW(parse_duration(""), Error);
  EXPECT_THROW(parse_duration("5x"), Error);
}

TEST(Common, AtomicWriteRoundTrip) {
  auto dir = std::filesystem::temp_directory_path() / ("clocklm_test_common_" + std::to_string(::getpid()));
  make_dirs(dir.string());
  auto p = (dir / "f.txt").string();
  atomic_write(p, "hello");
  EXPECT_EQ(read_file(p), "hello");
  atomic_write(p, "world!");
  EXPECT_EQ(read_file(p), "world!");
  EXPECT_THROW(read_file((dir / "missing").string()), Error);
  std::filesystem::remove_all(dir);
}

TEST(Common, RngDeterministic) {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next(), b.next());
  EXPECT_NE(Rng(42).next(), c.next());
}

// The child-process harness of the hostile-input tests measures what they assert: a command's
// peak memory, its exit code or signal, its time, and a kill when it runs past its limit.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_hostile_util.h"

namespace fs = std::filesystem;

TEST(HostileHarness, ReportsExitCodeOutputAndSignal) {
  hostile::Outcome o = hostile::run_limited("echo one; echo two >&2; exit 3");
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_EQ(o.signal, 0);
  EXPECT_FALSE(o.timed_out);
  ASSERT_EQ(o.lines().size(), 2u);
  EXPECT_EQ(o.lines()[0], "one");

  hostile::Outcome k = hostile::run_limited("kill -SEGV $$");
  EXPECT_EQ(k.exit_code, -1);
  EXPECT_EQ(k.signal, SIGSEGV);
}

TEST(HostileHarness, PeakMemoryCoversTheCommandsChildren) {
  // The shell holds 150 MB in a variable read from a pipe; a child of the shell does the work.
  hostile::Outcome o = hostile::run_limited("x=$(head -c 150000000 /dev/zero | tr '\\0' a); echo ${#x}");
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_GE(o.peak_rss_mib, 140) << o.out;
  EXPECT_LT(hostile::run_limited("true").peak_rss_mib, 64);
}

TEST(HostileHarness, KillsTheWholeGroupPastItsLimit) {
  hostile::Outcome o = hostile::run_limited("sleep 30 & sleep 30", 0.5);
  EXPECT_TRUE(o.timed_out);
  EXPECT_EQ(o.signal, SIGKILL);
  EXPECT_LT(o.seconds, 10);
}

TEST(HostileHarness, ChildKeepsTheEnvironmentAndUnwindsFastUnderSanitizers) {
  setenv("CLOCKLM_HARNESS_PROBE", "kept", 1);
  hostile::Outcome o = hostile::run_limited("echo \"$CLOCKLM_HARNESS_PROBE|$ASAN_OPTIONS\"");
  unsetenv("CLOCKLM_HARNESS_PROBE");
  ASSERT_EQ(o.lines().size(), 1u) << o.out;
  EXPECT_TRUE(o.lines()[0].starts_with("kept|")) << o.out;
#ifdef CLOCKLM_SANITIZE
  EXPECT_TRUE(o.lines()[0].ends_with("fast_unwind_on_malloc=1")) << o.out;
#endif
}

TEST(HostileHarness, SnapshotSeesRemovedAndChangedFiles) {
  fs::path d = fs::temp_directory_path() / ("clocklm-harness-" + std::to_string(getpid()));
  fs::create_directories(d / "sub");
  hostile::write_file(d / "a", "1");
  hostile::write_file(d / "sub" / "b", "22");
  auto before = hostile::snapshot(d);
  EXPECT_EQ(before.size(), 2u);
  EXPECT_EQ(hostile::snapshot(d), before);
  hostile::write_file(d / "sub" / "b", "333");
  EXPECT_NE(hostile::snapshot(d), before);
  fs::remove_all(d);
}

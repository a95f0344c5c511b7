// Tests for the progress display: without a terminal it prints plain lines (no carriage returns
// or escape codes), rate-limited; on a terminal it redraws one line (issue 5).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "core/progress.h"

using namespace clm;

static std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

TEST(ExpProgress, PlainLinesWithoutATerminal) {
  ::unsetenv("CLOCKLM_PROGRESS");
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("train", 100, f);
    EXPECT_FALSE(p.tty);
    p.log_interval = 1000;  // only the first update within the interval prints
    p.update(10, "step 1 | loss 9.00");
    p.update(20, "step 2 | loss 8.00");
    p.message("step 2 | val bpb 2.500");
    p.finish("val bpb 2.000");
  }
  std::string s = contents(f);
  std::fclose(f);
  EXPECT_EQ(s.find('\r'), std::string::npos);
  EXPECT_EQ(s.find('\033'), std::string::npos);
  EXPECT_NE(s.find("train  10.0% | step 1 | loss 9.00 |"), std::string::npos) << s;
  EXPECT_NE(s.find("ETA"), std::string::npos);
  EXPECT_EQ(s.find("loss 8.00"), std::string::npos) << s;  // rate-limited
  EXPECT_NE(s.find("step 2 | val bpb 2.500\n"), std::string::npos);
  EXPECT_NE(s.find("train done in"), std::string::npos);
  int lines = 0;
  for (char c : s) lines += c == '\n';
  EXPECT_EQ(lines, 3);
}

TEST(ExpProgress, LiveLineRedrawsInPlace) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("core", 4, f);
    p.tty = true;  // as if `f` were a terminal
    p.width = 60;
    p.update(1, "task hellaswag");
    p.finish("CORE 0.123");
  }
  std::string s = contents(f);
  std::fclose(f);
  EXPECT_NE(s.find("\r\033[Kcore  25.0% [#####...............] | task hellaswag"), std::string::npos) << s;
  EXPECT_NE(s.find("\r\033[Kcore done in"), std::string::npos);
  EXPECT_EQ(s.back(), '\n');
  size_t first_line = s.find("\r\033[Kcore done");
  EXPECT_LE(s.substr(0, first_line).size(), 4u + 59u);  // truncated to the terminal width
}

TEST(ExpProgress, EnvForcesPlain) {
  ::setenv("CLOCKLM_PROGRESS", "plain", 1);
  Progress p("x", 0, stderr);
  EXPECT_FALSE(p.tty);
  ::unsetenv("CLOCKLM_PROGRESS");
  EXPECT_EQ(fmt_eta(42), "42s");
  EXPECT_EQ(fmt_eta(185), "3m05s");
  EXPECT_EQ(fmt_eta(3720), "1h02m");
}

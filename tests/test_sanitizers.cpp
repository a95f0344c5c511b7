// In the sanitizer build (build-asan, -DCLOCKLM_SANITIZE=ON) the suite must really run under
// AddressSanitizer and UndefinedBehaviorSanitizer: if the build option stopped applying, CI would
// silently run the tests unsanitized. Skipped in other builds.
#include <dlfcn.h>
#include <gtest/gtest.h>

TEST(Sanitizers, RuntimesAreLoadedInTheSanitizerBuild) {
#ifndef CLOCKLM_SANITIZE
  GTEST_SKIP() << "not a sanitizer build";
#else
  EXPECT_NE(dlsym(RTLD_DEFAULT, "__asan_init"), nullptr);
  EXPECT_NE(dlsym(RTLD_DEFAULT, "__asan_report_load8"), nullptr);
  EXPECT_NE(dlsym(RTLD_DEFAULT, "__ubsan_handle_add_overflow_abort"), nullptr);
#endif
}

// The standard TrainHooks (see train_hooks.h), over lab/runinfo, profile/roofline and profile/profile_report.
#include "lab/train_hooks.h"

#include <cstdio>

#include "core/common.h"
#include "core/json_parse.h"
#include "profile/runinfo.h"
#include "profile/profile_report.h"
#include "profile/roofline.h"

namespace clm {

namespace {

// RUN/profile/{profile.json, trace.json, profile.txt}, compared against this machine's cached
// roofline (measured once).
void write_profile_files(const Profiler& prof, const std::string& dir, double seconds, int steps) {
  make_dirs(dir);
  ProfileSummary s = write_profile(prof, dir, seconds, steps);
  std::fprintf(stderr, "\ntrain: profile of %d steps written to %s\n%s", steps, dir.c_str(),
               format_profile_table(s, 15).c_str());
}

// This machine's cached roofline (`clocklm roofline`), if measured; 0 (MFU not shown) otherwise,
// so training never stalls to measure it.
double cached_peak_flops(int threads) {
  std::string path = roofline_cache_path(threads);
  if (path.empty() || !path_exists(path)) return 0;
  try {
    return roofline_from_json(parse_json(read_file(path), path)).peak_flops();
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

TrainHooks standard_train_hooks() {
  TrainHooks h;
  h.run_record = [](const std::vector<std::string>& argv) { return run_record(argv); };
  h.cpu_peak_flops = cached_peak_flops;
  h.write_profile = write_profile_files;
  return h;
}

}  // namespace clm

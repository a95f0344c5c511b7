// Fuzz target: a sweep spec file through parse_sweep_spec_text and each run's `clocklm train`
// arguments. Every run must get a distinct plain folder name.
#include <set>

#include "fuzz/fuzz_util.h"
#include "lab/sweep.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  fuzz::errors_only([&] {
    SweepSpec s = parse_sweep_spec_text(fuzz::text_of(data, size), "/specs/sweep.json");
    std::set<std::string> names;
    for (const SweepRun& r : s.runs) {
      fuzz::require(!r.name.empty() && r.name[0] != '.' && r.name.find('/') == std::string::npos,
                    "run name is a plain folder name");
      fuzz::require(names.insert(r.name).second, "run names are distinct");
      sweep_train_args(s, r, "/out/" + r.name, false);
    }
    fuzz::require(!s.name.empty() && s.name[0] != '.' && s.name.find('/') == std::string::npos,
                  "sweep name is a plain folder name");
  });
  return 0;
}

// Fuzz target: the CORE bundle's task list -- core.yaml and eval_meta_data.csv as two NUL-separated
// parts -- through parse_core_yaml, parse_csv and parse_core_tasks.
#include "eval/core.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  auto files = fuzz::split_files(fuzz::text_of(data, size), 2);
  fuzz::errors_only([&] { parse_core_yaml(files[0], "core.yaml"); });
  fuzz::errors_only([&] { parse_csv(files[1], "eval_meta_data.csv"); });
  fuzz::errors_only([&] {
    for (const CoreTask& t :
         parse_core_tasks(files[0], files[1], "core.yaml", "eval_meta_data.csv"))
      fuzz::require(t.num_fewshot >= 0 && t.num_fewshot <= 1000, "few-shot count in range");
  });
  return 0;
}

// Fuzz target: the run configuration -- a config JSON file, `--set key=value` overrides (one per
// line) and durations as --budget takes them (one per line), as three NUL-separated parts. A config
// that validates must survive to_json -> run_config_from_json unchanged, and its analytic counts
// must be computable.
#include "config/config.h"
#include "fuzz/fuzz_util.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  auto parts = fuzz::split_files(fuzz::text_of(data, size), 3);
  for (std::string_view d : fuzz::lines_of(parts[2]))
    fuzz::errors_only([&] { fuzz::require(parse_duration(d) >= 0, "a duration is >= 0"); });
  fuzz::errors_only([&] {
    RunConfig c = config_from_json_text(parts[0].empty() ? "{\"base\": \"d4\"}" : parts[0],
                                        "config.json", "fuzz");
    std::vector<std::string> sets;
    for (std::string_view l : fuzz::lines_of(parts[1])) sets.emplace_back(l);
    apply_overrides(c, sets);
    validate(c);
    nlohmann::json j = to_json(c);
    RunConfig back = run_config_from_json(j);
    fuzz::require(to_json(back) == j, "to_json/run_config_from_json round trip");
    fuzz::require(config_hash(back) == config_hash(c), "config_hash is stable");
    fuzz::require(count_params(c.model).total() > 0, "a model has parameters");
    fuzz::require(flops_per_token(c.model, c.model.seq_len) > 0, "a model has FLOPs");
  });
  return 0;
}

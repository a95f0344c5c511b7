// Fuzz target: a CORE task file (JSON Lines) through parse_core_items, then what eval_core does
// with the items for each task type: the published shuffle, few-shot choice, prompt rendering and
// the scored spans of build_core_example (tokens are bytes here; no model is involved).
#include "eval/core.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  std::vector<nlohmann::json> items;
  fuzz::errors_only([&] { items = parse_core_items(fuzz::text_of(data, size), "task.jsonl"); });
  if (items.empty()) return 0;
  core_shuffle(items);
  const int64_t n = int64_t(items.size());
  for (CoreTaskType type :
       {CoreTaskType::MultipleChoice, CoreTaskType::Schema, CoreTaskType::LanguageModeling}) {
    CoreTask task;
    task.type = type;
    task.num_fewshot = int(std::min<int64_t>(n - 1, 2));
    for (int64_t i = 0; i < std::min<int64_t>(n, 3); ++i) {
      fuzz::errors_only([&] {
        std::vector<const nlohmann::json*> shots;
        for (int64_t k : core_fewshot_indices(n, i, task.num_fewshot)) {
          fuzz::require(k >= 0 && k < n && k != i, "few-shot index in range");
          shots.push_back(&items[size_t(k)]);
        }
        std::vector<std::string> prompts = render_core_prompts(task, items[size_t(i)], shots);
        std::vector<std::vector<int32_t>> tokens;
        for (const std::string& p : prompts) {
          std::vector<int32_t> t{256};  // BOS, then one token per byte
          for (unsigned char c : p) t.push_back(c);
          tokens.push_back(std::move(t));
        }
        int gold = type == CoreTaskType::LanguageModeling ? 0 : items[size_t(i)]["gold"].get<int>();
        CoreExample ex = build_core_example(type, tokens, gold, 64);
        for (const CoreRow& r : ex.rows)
          fuzz::require(r.tokens.size() <= 64 && 1 <= r.start && r.start < r.end &&
                            r.end <= int(r.tokens.size()),
                        "scored span inside the row");
      });
    }
  }
  return 0;
}

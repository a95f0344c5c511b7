// The CORE in-context benchmark (issue 4), following the published rules in docs/EVAL.md.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clm {

struct GPT;
struct Tokenizer;

struct CoreOptions {
  std::string bundle;               // folder with core.yaml, eval_meta_data.csv, eval_data/
  int max_per_task = 0;             // 0 = all items
  std::vector<std::string> tasks;   // empty = all
  int batch = 8;
  bool progress = true;
};

// Returns {"tasks": {label: {accuracy, centered, n}}, "missing": [...], "core": x,
//          "tasks_evaluated": n, "tasks_total": 22}.
nlohmann::json eval_core(GPT& model, const Tokenizer& tok, const CoreOptions& opt);

}  // namespace clm

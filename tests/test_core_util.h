// A small synthetic CORE bundle (three tasks of nine items: multiple choice, schema, language
// modelling; optionally a fourth whose data file is missing), for the tests that score CORE.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "core/common.h"

namespace core_test {

using clm::atomic_write;
using clm::make_dirs;
using nlohmann::json;

// The right answers contain '*' ("*right", "*starred ctx"), so a stub model can know them.
inline void write_core_bundle(const std::string& dir, bool with_missing) {
  make_dirs(dir + "/eval_data/x");
  std::string yaml = "icl_tasks:\n-\n  label: mc\n  dataset_uri: x/mc.jsonl\n  num_fewshot: [2]\n  icl_task_type: multiple_choice\n"
                     "-\n  label: sc\n  dataset_uri: x/sc.jsonl\n  num_fewshot: [0]\n  icl_task_type: schema\n"
                     "-\n  label: lm\n  dataset_uri: x/lm.jsonl\n  num_fewshot: [1]\n  icl_task_type: language_modeling\n  continuation_delimiter: \"\\nA: \"\n";
  if (with_missing) yaml += "-\n  label: gone\n  dataset_uri: x/gone.jsonl\n  num_fewshot: [0]\n  icl_task_type: language_modeling\n";
  atomic_write(dir + "/core.yaml", yaml);
  atomic_write(dir + "/eval_meta_data.csv",
               "Eval Task,Task Category,Random baseline,Description\nmc,x,25,\"four, choices\"\nsc,x,50,y\nlm,x,0,z\ngone,x,0,w\n");
  std::string mc, sc, lm;
  for (int i = 0; i < 9; i++) {
    int g = i % 4;
    json choices = json::array();
    for (int c = 0; c < 4; c++) choices.push_back(c == g ? "*right" : "wrong" + std::to_string(c));
    mc += json({{"query", "q" + std::to_string(i)}, {"choices", choices}, {"gold", g}}).dump() + "\n";
    int gs = i % 2;
    json opts = gs ? json::array({"plain ctx", "*starred ctx"}) : json::array({"*starred ctx", "plain ctx"});
    sc += json({{"context_options", opts}, {"continuation", "ends here"}, {"gold", gs}}).dump() + "\n";
    lm += json({{"context", " c" + std::to_string(i) + " "}, {"continuation", "cont" + std::to_string(i)}}).dump() + "\n";
  }
  atomic_write(dir + "/eval_data/x/mc.jsonl", mc);
  atomic_write(dir + "/eval_data/x/sc.jsonl", sc);
  atomic_write(dir + "/eval_data/x/lm.jsonl", lm);
}

}  // namespace core_test

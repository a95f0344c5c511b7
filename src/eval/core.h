// The CORE in-context benchmark, following the published rules in docs/EVAL.md.
// The pipeline, one step per function so each is testable on its own:
//   load_core_tasks (core.yaml + eval_meta_data.csv) -> load_core_items + core_shuffle ->
//   core_fewshot_indices -> render_core_prompts -> build_core_example (tokens + scored spans,
//   cropped to the context) -> a CoreScorer scores rows in batches -> judge_core_example ->
//   centered accuracy per task -> CORE = mean over the tasks evaluated.
// The model sits behind CoreModel (a scoring callable + an encoder), so everything but the GPT
// adapter (core_gpt.cpp) runs against stubs in tests.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/kv_decode.h"  // PrefixGroup

namespace clm {

struct GPT;
struct Tokenizer;
class Comm;

struct CoreOptions {
  std::string bundle;               // folder with core.yaml, eval_meta_data.csv, eval_data/
  int max_per_task = 0;             // 0 = all items
  std::vector<std::string> tasks;   // empty = all
  int batch = 8;                    // rows per forward
  bool progress = true;
  // Several ranks: every rank calls eval_core; item i of each task is scored on rank i mod world
  // and the counts are summed exactly, so every rank returns what one process would. Progress is
  // rank 0's share.
  Comm* comm = nullptr;
};

// Returns {"tasks": {label: {accuracy, centered, n, ...}}, "missing": [...], "core": x,
//          "tasks_evaluated": n, "tasks_total": 22}.
nlohmann::json eval_core(GPT& model, const Tokenizer& tok, const CoreOptions& opt);

// ---- task definitions ------------------------------------------------------------------------
enum class CoreTaskType { MultipleChoice, Schema, LanguageModeling };

struct CoreTask {
  std::string label;              // e.g. "hellaswag_zeroshot"
  std::string dataset_uri;        // relative to BUNDLE/eval_data
  CoreTaskType type = CoreTaskType::MultipleChoice;
  int num_fewshot = 0;            // the first entry of core.yaml's num_fewshot list
  std::string delimiter = " ";    // continuation_delimiter
  double random_baseline = 0;     // percent, from eval_meta_data.csv
};

const char* core_task_type_name(CoreTaskType t);
// Parses BUNDLE/core.yaml and joins each task with its random baseline; throws Error naming the
// file and line on malformed input or a task without a baseline.
std::vector<CoreTask> load_core_tasks(const std::string& bundle);
// The subset of YAML that core.yaml uses: `icl_tasks:` followed by a list of flat mappings whose
// values are plain/single-/double-quoted scalars or flow lists of scalars. Values are returned as
// strings, flow lists as arrays of strings. `what` names the source in error messages.
nlohmann::json parse_core_yaml(std::string_view text, const std::string& what);
// RFC 4180 CSV (quoted fields, "" escapes, newlines inside quotes) -> rows of fields.
std::vector<std::vector<std::string>> parse_csv(std::string_view text, const std::string& what);
// The same from the two files' contents; the paths name them in errors.
std::vector<CoreTask> parse_core_tasks(std::string_view yaml, std::string_view meta_csv,
                                       const std::string& ypath, const std::string& mpath);
// One JSON object per line; throws Error naming file and line.
std::vector<nlohmann::json> load_core_items(const std::string& path);
std::vector<nlohmann::json> parse_core_items(std::string_view text, const std::string& path);

// ---- the published sampling rules ------------------------------------------------------------
void core_shuffle(std::vector<nlohmann::json>& items);  // random.Random(1337).shuffle(items)
// random.Random(1234 + idx).sample([i for i in range(n) if i != idx], k)
std::vector<int64_t> core_fewshot_indices(int64_t n, int64_t idx, int k);

// ---- rendering and tokenization --------------------------------------------------------------
// Python's str.strip(): removes leading/trailing Unicode whitespace (UTF-8).
std::string py_strip(std::string_view s);
// The prompts for one item: MC one per choice, schema one per context option, LM {without, with}
// (the continuation-less prompt is stripped, as in the reference). Shots are joined by "\n\n".
std::vector<std::string> render_core_prompts(const CoreTask& task, const nlohmann::json& item,
                                             const std::vector<const nlohmann::json*>& shots);

struct CoreRow {
  std::vector<int32_t> tokens;  // BOS + prompt, cropped from the left to the context
  int start = 0, end = 0;       // scored tokens are tokens[start, end); position p-1 predicts p
};
struct CoreExample {
  std::vector<CoreRow> rows;
  int gold = 0;                 // MC/schema: index of the correct row; LM: 0
  bool prefix_mismatch = false; // LM: the continuation-less prompt's tokens were not a prefix
};
// tokens[r] = BOS + encode(prompts[r]) for each prompt. Finds the scored spans (MC: after the
// prefix common to all choices; schema: the suffix common to all options; LM: after the
// continuation-less prompt) and crops rows longer than `context` from the left.
CoreExample build_core_example(CoreTaskType type, std::vector<std::vector<int32_t>> tokens, int gold,
                               int context);

// ---- scoring ---------------------------------------------------------------------------------
// Scores B rows of T tokens exactly like GPT::forward: for each position p with targets[p] >= 0,
// token_loss[p] = cross-entropy (nats) of targets[p], argmax[p] = the most likely next token.
using CoreScorer = std::function<void(const int32_t* inputs, const int32_t* targets, int B, int T,
                                      float* token_loss, int32_t* argmax)>;
// Encodes many texts (no BOS); order preserved.
using CoreEncoder = std::function<std::vector<std::vector<uint32_t>>(const std::vector<std::string_view>&)>;

// Optional: scores groups of rows that share their first tokens, computing those once. Tokens are
// packed group by group (prefix, then each branch); targets/loss/argmax are per packed token, with
// the same meaning as for CoreScorer (see KVDecoder::score_groups).
using CoreGroupScorer = std::function<void(const int32_t* tokens, const std::vector<PrefixGroup>& groups,
                                           const int32_t* targets, float* loss, int32_t* argmax)>;

struct CoreModel {
  CoreScorer score;
  CoreGroupScorer score_groups;  // may be empty: then every row is scored whole by `score`
  CoreEncoder encode;
  uint32_t bos = 0;
  int context = 1024;   // rows are cropped to this many tokens
  int max_rows = 8;     // at most this many rows per score() call
};

struct CoreRowScore {
  double mean_loss = 0;  // mean cross-entropy over the scored span
  bool all_match = true; // greedy argmax reproduces every scored token
};
// MC/schema: the row with the lowest mean loss (first on ties) is the gold row; LM: all_match.
bool judge_core_example(CoreTaskType type, const CoreExample& ex, const std::vector<CoreRowScore>& s);
// Scores every row of the examples. Rows of one example that begin with the same tokens (at least
// kCoreMinShared of them, and not past any row's scored span) go to m.score_groups when it is set, so
// the shared context is computed once (multiple choice: the shots and the question; rows cropped by
// different amounts differ from the first token and stay whole). Other rows are batched by
// length. `forward_tokens` (optional) += the tokens actually run through the model.
constexpr int kCoreMinShared = 8;
std::vector<std::vector<CoreRowScore>> score_core_examples(const CoreModel& m,
                                                           const std::vector<CoreExample>& exs,
                                                           int64_t* forward_tokens = nullptr);

double centered_accuracy(double accuracy, double random_baseline_percent);

// The whole benchmark against any model. Prints per-task progress to stderr when opt.progress.
nlohmann::json eval_core(const CoreModel& m, const CoreOptions& opt);
// The per-task table in the layout of reference/*.csv ("Task, Accuracy, Centered" with padded
// columns), all tasks in core.yaml order (missing ones marked), then the CORE line and the count.
std::string format_core_table(const nlohmann::json& result);

}  // namespace clm

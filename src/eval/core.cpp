// CORE scoring and the benchmark driver: batches the rows of many items by length, asks the model
// (behind CoreModel) for per-token losses and argmax, judges each item by the published rules and
// aggregates centered accuracies into CORE. The model adapter for GPT lives in core_gpt.cpp.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/common.h"
#include "eval/core.h"
#include "exp/progress.h"

namespace clm {

double centered_accuracy(double accuracy, double b) {
  // volatile keeps the compiler from fusing 0.01*b into an FMA, so the value is bit-identical to
  // the reference's (acc - 0.01*b) / (1 - 0.01*b) in Python.
  volatile double base = 0.01 * b;
  return (accuracy - base) / (1.0 - base);
}

bool judge_core_example(CoreTaskType type, const CoreExample& ex, const std::vector<CoreRowScore>& s) {
  if (s.size() != ex.rows.size()) fail("CORE: {} scores for {} rows", s.size(), ex.rows.size());
  if (type == CoreTaskType::LanguageModeling) return s[0].all_match;
  size_t best = 0;  // first minimum, like list.index(min(...))
  for (size_t r = 1; r < s.size(); r++)
    if (s[r].mean_loss < s[best].mean_loss) best = r;
  return (int)best == ex.gold;
}

std::vector<std::vector<CoreRowScore>> score_core_examples(const CoreModel& m,
                                                           const std::vector<CoreExample>& exs) {
  struct Ref { int ex, row, len; };
  std::vector<Ref> refs;
  std::vector<std::vector<CoreRowScore>> out(exs.size());
  for (int e = 0; e < (int)exs.size(); e++) {
    out[e].resize(exs[e].rows.size());
    for (int r = 0; r < (int)exs[e].rows.size(); r++) {
      int len = (int)exs[e].rows[r].tokens.size();
      if (len > m.context) fail("CORE: row of {} tokens exceeds the context {}", len, m.context);
      refs.push_back({e, r, len});
    }
  }
  // Longest first: rows of similar length share a forward, so little compute goes to padding.
  std::stable_sort(refs.begin(), refs.end(), [](const Ref& a, const Ref& b) { return a.len > b.len; });
  int maxB = std::max(1, m.max_rows);
  std::vector<int32_t> inputs, targets, argmax;
  std::vector<float> loss;
  for (size_t i0 = 0; i0 < refs.size(); i0 += maxB) {
    int B = (int)std::min<size_t>(maxB, refs.size() - i0);
    // Rounded up to a multiple of 32 (within the context): the matmul library builds a kernel per
    // shape, so a handful of shapes instead of one per distinct row length saves real time.
    int T = std::min(m.context, (refs[i0].len + 31) / 32 * 32);
    inputs.assign((size_t)B * T, (int32_t)m.bos);  // BOS pads the tail; causal attention ignores it
    targets.assign((size_t)B * T, -1);
    loss.assign((size_t)B * T, 0.0f);
    argmax.assign((size_t)B * T, -1);
    for (int b = 0; b < B; b++) {
      const CoreRow& row = exs[refs[i0 + b].ex].rows[refs[i0 + b].row];
      std::copy(row.tokens.begin(), row.tokens.end(), inputs.begin() + (size_t)b * T);
      for (int p = row.start; p < row.end; p++) targets[(size_t)b * T + p - 1] = row.tokens[p];
    }
    m.score(inputs.data(), targets.data(), B, T, loss.data(), argmax.data());
    for (int b = 0; b < B; b++) {
      const CoreRow& row = exs[refs[i0 + b].ex].rows[refs[i0 + b].row];
      CoreRowScore& sc = out[refs[i0 + b].ex][refs[i0 + b].row];
      double sum = 0;
      bool match = true;
      for (int p = row.start; p < row.end; p++) {
        sum += loss[(size_t)b * T + p - 1];
        match = match && argmax[(size_t)b * T + p - 1] == row.tokens[p];
      }
      sc.mean_loss = sum / (row.end - row.start);
      sc.all_match = match;
    }
  }
  return out;
}

namespace {

// Evaluates one task's (already shuffled and truncated) items. Returns {correct, prefix_mismatch}.
std::pair<int64_t, int64_t> run_task(const CoreModel& m, const CoreTask& task,
                                     const std::vector<nlohmann::json>& items, Progress* prog,
                                     int64_t* tokens_scored) {
  const int64_t n = (int64_t)items.size();
  // Chunks big enough that length-sorting finds similar rows, small enough to bound memory.
  const int64_t chunk = std::max<int64_t>(64, 16 * std::max(1, m.max_rows));
  int64_t correct = 0, mismatch = 0, done = 0;
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    int64_t c1 = std::min(n, c0 + chunk);
    std::vector<std::vector<std::string>> prompts(c1 - c0);
    std::vector<std::string_view> flat;
    for (int64_t i = c0; i < c1; i++) {
      std::vector<const nlohmann::json*> shots;
      for (int64_t s : core_fewshot_indices(n, i, task.num_fewshot)) shots.push_back(&items[s]);
      prompts[i - c0] = render_core_prompts(task, items[i], shots);
    }
    for (auto& p : prompts)
      for (auto& s : p) flat.push_back(s);
    std::vector<std::vector<uint32_t>> enc = m.encode(flat);
    if (enc.size() != flat.size()) fail("CORE: encoder returned {} sequences for {} texts", enc.size(), flat.size());
    std::vector<CoreExample> exs;
    size_t k = 0;
    for (int64_t i = c0; i < c1; i++) {
      std::vector<std::vector<int32_t>> toks;
      for (size_t r = 0; r < prompts[i - c0].size(); r++, k++) {
        std::vector<int32_t> t;
        t.reserve(enc[k].size() + 1);
        t.push_back((int32_t)m.bos);
        for (uint32_t id : enc[k]) t.push_back((int32_t)id);
        toks.push_back(std::move(t));
      }
      int gold = task.type == CoreTaskType::LanguageModeling ? 0 : items[i]["gold"].get<int>();
      exs.push_back(build_core_example(task.type, std::move(toks), gold, m.context));
      mismatch += exs.back().prefix_mismatch;
      for (const auto& row : exs.back().rows) *tokens_scored += (int64_t)row.tokens.size();
    }
    auto scores = score_core_examples(m, exs);
    for (size_t e = 0; e < exs.size(); e++) correct += judge_core_example(task.type, exs[e], scores[e]);
    done = c1;
    if (prog) prog->update((double)done, fmt::format("{}/{} items | acc {:.4f}", done, n, (double)correct / done));
  }
  return {correct, mismatch};
}

}  // namespace

nlohmann::json eval_core(const CoreModel& m, const CoreOptions& opt) {
  std::vector<CoreTask> all = load_core_tasks(opt.bundle);
  std::vector<CoreTask> tasks;
  for (const auto& name : opt.tasks) {
    auto it = std::find_if(all.begin(), all.end(), [&](const CoreTask& t) { return t.label == name; });
    if (it == all.end()) {
      std::string names;
      for (const auto& t : all) names += (names.empty() ? "" : ", ") + t.label;
      fail("unknown CORE task '{}' (tasks: {})", name, names);
    }
  }
  for (const auto& t : all)
    if (opt.tasks.empty() || std::find(opt.tasks.begin(), opt.tasks.end(), t.label) != opt.tasks.end())
      tasks.push_back(t);

  nlohmann::json res;
  res["tasks"] = nlohmann::json::object();
  res["missing"] = nlohmann::json::array();
  res["task_order"] = nlohmann::json::array();
  for (const auto& t : all) res["task_order"].push_back(t.label);
  double t_start = now_seconds();
  double sum_centered = 0;
  int evaluated = 0;
  for (size_t ti = 0; ti < tasks.size(); ti++) {
    const CoreTask& task = tasks[ti];
    std::string path = opt.bundle + "/eval_data/" + task.dataset_uri;
    if (!path_exists(path)) {
      res["missing"].push_back(task.label);
      if (opt.progress) std::fprintf(stderr, "core: %s: data file %s is missing, task skipped\n", task.label.c_str(), path.c_str());
      continue;
    }
    double t0 = now_seconds();
    std::vector<nlohmann::json> items = load_core_items(path);
    core_shuffle(items);
    if (opt.max_per_task > 0 && (int64_t)items.size() > opt.max_per_task) items.resize(opt.max_per_task);
    if (items.empty()) fail("CORE task {}: {} has no items", task.label, path);
    std::unique_ptr<Progress> prog;
    if (opt.progress)
      prog = std::make_unique<Progress>(fmt::format("core [{}/{}] {}", ti + 1, tasks.size(), task.label),
                                        (double)items.size());
    int64_t tokens = 0;
    auto [correct, mismatch] = run_task(m, task, items, prog.get(), &tokens);
    double acc = (double)correct / items.size();
    double cen = centered_accuracy(acc, task.random_baseline);
    double secs = now_seconds() - t0;
    if (prog) prog->finish(fmt::format("acc {:.4f} | centered {:.4f} | {} items | {:.1f}s", acc, cen, items.size(), secs));
    nlohmann::json tj = {{"accuracy", acc}, {"centered", cen}, {"n", (int64_t)items.size()},
                         {"correct", correct}, {"random_baseline", task.random_baseline},
                         {"type", core_task_type_name(task.type)}, {"num_fewshot", task.num_fewshot},
                         {"tokens", tokens}, {"seconds", secs}};
    if (task.type == CoreTaskType::LanguageModeling) tj["prefix_mismatch"] = mismatch;
    res["tasks"][task.label] = tj;
    sum_centered += cen;
    evaluated++;
  }
  res["tasks_evaluated"] = evaluated;
  res["tasks_total"] = (int)all.size();
  res["core"] = evaluated > 0 ? nlohmann::json(sum_centered / evaluated) : nlohmann::json(nullptr);
  res["max_per_task"] = opt.max_per_task;
  res["seconds"] = now_seconds() - t_start;
  std::string note = fmt::format("CORE over {} of {} tasks", evaluated, all.size());
  if (!res["missing"].empty()) {
    std::string miss;
    for (const auto& x : res["missing"]) miss += (miss.empty() ? "" : ", ") + x.get<std::string>();
    note += " (missing: " + miss + ")";
  }
  if (opt.max_per_task > 0) note += fmt::format(", at most {} items per task (an estimate)", opt.max_per_task);
  res["note"] = note;
  return res;
}

std::string format_core_table(const nlohmann::json& r) {
  // Same column layout as reference/openai-community-gpt2*.csv, so the two can be read side by side.
  std::string out = fmt::format("{:<35}, {:<10}, {:<10}\n", "Task", "Accuracy", "Centered");
  std::vector<std::string> order;
  if (r.contains("task_order"))
    for (const auto& x : r["task_order"]) order.push_back(x.get<std::string>());
  else
    for (auto it = r["tasks"].begin(); it != r["tasks"].end(); ++it) order.push_back(it.key());
  for (const auto& label : order) {
    if (r["tasks"].contains(label)) {
      const auto& t = r["tasks"][label];
      out += fmt::format("{:<35}, {:<10.6f}, {:<10.6f}\n", label, t["accuracy"].get<double>(), t["centered"].get<double>());
    } else {
      bool missing = std::find(r["missing"].begin(), r["missing"].end(), label) != r["missing"].end();
      out += fmt::format("{:<35}, {:<10}, {:<10}\n", label, missing ? "missing" : "-", missing ? "missing" : "-");
    }
  }
  if (r["core"].is_number()) out += fmt::format("{:<35}, {:<10}, {:<10.6f}\n", "CORE", "", r["core"].get<double>());
  else out += fmt::format("{:<35}, {:<10}, {:<10}\n", "CORE", "", "n/a");
  out += r["note"].get<std::string>() + "\n";
  return out;
}

}  // namespace clm

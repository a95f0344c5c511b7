// CORE scoring and the benchmark driver: batches the rows of many items by length, asks the model
// (behind CoreModel) for per-token losses and argmax, judges each item by the published rules and
// aggregates centered accuracies into CORE. The model adapter for GPT lives in core_gpt.cpp.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/common.h"
#include "dist/comm.h"
#include "eval/core.h"
#include "core/progress.h"

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

namespace {

// Mean loss and greedy match of one row from per-position outputs; at(p) is the index of the output
// for the position that predicts token p (i.e. of token p-1).
template <typename At>
CoreRowScore row_score(const CoreRow& row, const float* loss, const int32_t* argmax, At at) {
  CoreRowScore sc;
  double sum = 0;
  for (int p = row.start; p < row.end; p++) {
    sum += loss[at(p)];
    sc.all_match = sc.all_match && argmax[at(p)] == row.tokens[p];
  }
  sc.mean_loss = sum / (row.end - row.start);
  return sc;
}

int common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = std::min(a.size(), b.size()), i = 0;
  while (i < n && a[i] == b[i]) i++;
  return (int)i;
}

struct RowRef { int ex, row, len; };
struct SharedRows { int ex; std::vector<int> rows; int shared; };

// Splits each example's rows into groups that share a prefix (see score_core_examples) and rows
// scored whole.
void plan_rows(const std::vector<CoreExample>& exs, bool grouping, std::vector<RowRef>* whole,
               std::vector<SharedRows>* groups) {
  for (int e = 0; e < (int)exs.size(); e++) {
    const auto& rows = exs[e].rows;
    std::vector<bool> used(rows.size(), false);
    for (int r0 = 0; r0 < (int)rows.size(); r0++) {
      if (used[r0]) continue;
      SharedRows g{e, {r0}, (int)rows[r0].tokens.size()};
      for (int r = r0 + 1; grouping && r < (int)rows.size(); r++) {
        if (used[r]) continue;
        int l = common_prefix(rows[r0].tokens, rows[r].tokens);
        if (l < kCoreMinShared) continue;
        g.rows.push_back(r);
        g.shared = std::min(g.shared, l);
      }
      // Position p-1 predicts token p: every scored position must lie in a row's own branch.
      for (int r : g.rows) g.shared = std::min(g.shared, rows[r].start - 1);
      if (g.rows.size() >= 2 && g.shared >= kCoreMinShared) {
        for (int r : g.rows) used[r] = true;
        groups->push_back(std::move(g));
      } else {
        used[r0] = true;
        whole->push_back({e, r0, (int)rows[r0].tokens.size()});
      }
    }
  }
}

}  // namespace

std::vector<std::vector<CoreRowScore>> score_core_examples(const CoreModel& m,
                                                           const std::vector<CoreExample>& exs,
                                                           int64_t* forward_tokens) {
  std::vector<std::vector<CoreRowScore>> out(exs.size());
  for (size_t e = 0; e < exs.size(); e++) {
    out[e].resize(exs[e].rows.size());
    for (const auto& row : exs[e].rows)
      if ((int)row.tokens.size() > m.context)
        fail("CORE: row of {} tokens exceeds the context {}", row.tokens.size(), m.context);
  }
  std::vector<RowRef> refs;
  std::vector<SharedRows> groups;
  plan_rows(exs, (bool)m.score_groups, &refs, &groups);
  int64_t computed = 0;
  std::vector<int32_t> inputs, targets, argmax;
  std::vector<float> loss;

  // Groups, packed without padding, about max_rows * context tokens per call.
  const int64_t budget = (int64_t)std::max(1, m.max_rows) * m.context;
  for (size_t g0 = 0; g0 < groups.size();) {
    std::vector<PrefixGroup> layout;
    inputs.clear();
    targets.clear();
    size_t g1 = g0;
    while (g1 < groups.size() && (g1 == g0 || (int64_t)inputs.size() < budget)) {
      const SharedRows& g = groups[g1++];
      const auto& rows = exs[g.ex].rows;
      PrefixGroup pg;
      pg.prefix = g.shared;
      inputs.insert(inputs.end(), rows[g.rows[0]].tokens.begin(), rows[g.rows[0]].tokens.begin() + g.shared);
      targets.insert(targets.end(), g.shared, -1);
      for (int r : g.rows) {
        const CoreRow& row = rows[r];
        size_t base = inputs.size();
        pg.branches.push_back((int)row.tokens.size() - g.shared);
        inputs.insert(inputs.end(), row.tokens.begin() + g.shared, row.tokens.end());
        targets.resize(inputs.size(), -1);
        for (int p = row.start; p < row.end; p++) targets[base + (p - 1 - g.shared)] = row.tokens[p];
      }
      layout.push_back(std::move(pg));
    }
    loss.assign(inputs.size(), 0.0f);
    argmax.assign(inputs.size(), -1);
    m.score_groups(inputs.data(), layout, targets.data(), loss.data(), argmax.data());
    computed += (int64_t)inputs.size();
    size_t base = 0;
    for (size_t gi = g0; gi < g1; gi++) {
      const SharedRows& g = groups[gi];
      base += g.shared;
      for (int r : g.rows) {
        const CoreRow& row = exs[g.ex].rows[r];
        out[g.ex][r] = row_score(row, loss.data(), argmax.data(), [&](int p) { return base + (p - 1 - g.shared); });
        base += row.tokens.size() - g.shared;
      }
    }
    g0 = g1;
  }

  // Whole rows, longest first: rows of similar length share a forward, so little goes to padding.
  std::stable_sort(refs.begin(), refs.end(), [](const RowRef& a, const RowRef& b) { return a.len > b.len; });
  int maxB = std::max(1, m.max_rows);
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
    computed += (int64_t)B * T;
    for (int b = 0; b < B; b++) {
      const CoreRow& row = exs[refs[i0 + b].ex].rows[refs[i0 + b].row];
      out[refs[i0 + b].ex][refs[i0 + b].row] =
          row_score(row, loss.data(), argmax.data(), [&](int p) { return (size_t)b * T + p - 1; });
    }
  }
  if (forward_tokens) *forward_tokens += computed;
  return out;
}

namespace {

// Evaluates one task's (already shuffled and truncated) items. Returns {correct, prefix_mismatch}.
// `mine`: the indices of the items this rank scores (few-shot examples come from all of them).
std::pair<int64_t, int64_t> run_task(const CoreModel& m, const CoreTask& task,
                                     const std::vector<nlohmann::json>& items, const std::vector<int64_t>& mine,
                                     Progress* prog, int64_t* tokens_scored, int64_t* tokens_forward) {
  const int64_t n = (int64_t)items.size(), n_mine = (int64_t)mine.size();
  // Chunks big enough that length-sorting finds similar rows, small enough to bound memory.
  const int64_t chunk = std::max<int64_t>(64, 16 * std::max(1, m.max_rows));
  int64_t correct = 0, mismatch = 0, done = 0;
  for (int64_t c0 = 0; c0 < n_mine; c0 += chunk) {
    int64_t c1 = std::min(n_mine, c0 + chunk);
    std::vector<std::vector<std::string>> prompts(c1 - c0);
    std::vector<std::string_view> flat;
    for (int64_t i = c0; i < c1; i++) {
      std::vector<const nlohmann::json*> shots;
      for (int64_t s : core_fewshot_indices(n, mine[i], task.num_fewshot)) shots.push_back(&items[s]);
      prompts[i - c0] = render_core_prompts(task, items[mine[i]], shots);
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
      int gold = task.type == CoreTaskType::LanguageModeling ? 0 : items[mine[i]]["gold"].get<int>();
      exs.push_back(build_core_example(task.type, std::move(toks), gold, m.context));
      mismatch += exs.back().prefix_mismatch;
      for (const auto& row : exs.back().rows) *tokens_scored += (int64_t)row.tokens.size();
    }
    auto scores = score_core_examples(m, exs, tokens_forward);
    for (size_t e = 0; e < exs.size(); e++) correct += judge_core_example(task.type, exs[e], scores[e]);
    done = c1;
    if (prog)
      prog->update((double)done, fmt::format("{}/{} items | acc {:.4f}", done, n_mine, (double)correct / done));
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
  const int world = opt.comm ? opt.comm->world() : 1, rank = opt.comm ? opt.comm->rank() : 0;
  for (size_t ti = 0; ti < tasks.size(); ti++) {
    const CoreTask& task = tasks[ti];
    std::string path = opt.bundle + "/eval_data/" + task.dataset_uri;
    // Decided together: a file missing on one host skips the task on every rank.
    const bool missing = world > 1 ? opt.comm->any(!path_exists(path)) : !path_exists(path);
    if (missing) {
      res["missing"].push_back(task.label);
      if (opt.progress && rank == 0) std::fprintf(stderr, "core: %s: data file %s is missing, task skipped\n", task.label.c_str(), path.c_str());
      continue;
    }
    double t0 = now_seconds();
    std::vector<nlohmann::json> items = load_core_items(path);
    core_shuffle(items);
    if (opt.max_per_task > 0 && (int64_t)items.size() > opt.max_per_task) items.resize(opt.max_per_task);
    if (items.empty()) fail("CORE task {}: {} has no items", task.label, path);
    std::vector<int64_t> mine;
    for (int64_t i = rank; i < (int64_t)items.size(); i += world) mine.push_back(i);
    std::unique_ptr<Progress> prog;
    if (opt.progress && rank == 0)
      prog = std::make_unique<Progress>(
          fmt::format("core [{}/{}] {}{}", ti + 1, tasks.size(), task.label,
                      world > 1 ? fmt::format(" (rank 0 of {})", world) : std::string()),
          (double)mine.size());
    int64_t tokens = 0, forward = 0;
    auto [correct, mismatch] = run_task(m, task, items, mine, prog.get(), &tokens, &forward);
    if (world > 1) {
      // Counts well below 2^53, so the double sums are exact.
      double c[4] = {double(correct), double(mismatch), double(tokens), double(forward)};
      opt.comm->all_reduce(c, 4, ReduceOp::Sum);
      correct = int64_t(c[0]);
      mismatch = int64_t(c[1]);
      tokens = int64_t(c[2]);
      forward = int64_t(c[3]);
    }
    double acc = (double)correct / items.size();
    double cen = centered_accuracy(acc, task.random_baseline);
    double secs = now_seconds() - t0;
    if (prog) prog->finish(fmt::format("acc {:.4f} | centered {:.4f} | {} items | {:.1f}s", acc, cen, items.size(), secs));
    nlohmann::json tj = {{"accuracy", acc}, {"centered", cen}, {"n", (int64_t)items.size()},
                         {"correct", correct}, {"random_baseline", task.random_baseline},
                         {"type", core_task_type_name(task.type)}, {"num_fewshot", task.num_fewshot},
                         {"tokens", tokens}, {"forward_tokens", forward}, {"seconds", secs}};
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

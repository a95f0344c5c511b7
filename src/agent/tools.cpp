// clocklm's MCP tools (see tools.h). Each tool is a thin layer over the library function the
// matching CLI command calls, so a tool and its command give the same numbers and the same error
// messages; what the tool adds is an input schema, an output schema and structured JSON.
#include "agent/tools.h"

#include <cmath>
#include <filesystem>

#include "backend/backend.h"
#include "config/config.h"
#include "core/common.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "eval/bpb.h"
#include "eval/core.h"
#include "eval/model_load.h"
#include "eval/sample.h"
#include "lab/exp_results.h"
#include "lab/journal.h"
#include "lab/queue_runner.h"
#include "profile/runinfo.h"
#include "model/config.h"
#include "profile/roofline.h"
#include "report/report.h"
#include "report/runs.h"

namespace clm {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// ---- schema helpers ----
json str(const std::string& d) { return {{"type", "string"}, {"description", d}}; }
json nonempty(const std::string& d) {
  return {{"type", "string"}, {"minLength", 1}, {"description", d}};
}
json integer(const std::string& d, int64_t min) {
  return {{"type", "integer"}, {"minimum", min}, {"description", d}};
}
json number(const std::string& d) { return {{"type", "number"}, {"description", d}}; }
json boolean(const std::string& d) { return {{"type", "boolean"}, {"description", d}}; }
json strings(const std::string& d) {
  return {{"type", "array"}, {"items", {{"type", "string"}}}, {"description", d}};
}
json input(json props, std::vector<std::string> required = {}) {
  json j = {{"type", "object"}, {"properties", props}, {"additionalProperties", false}};
  if (!required.empty()) j["required"] = required;
  return j;
}
json output(json props, std::vector<std::string> required) {
  return {{"type", "object"}, {"properties", props}, {"required", required}};
}
const json kObject = {{"type", "object"}};
const json kArray = {{"type", "array"}};
const json kNullableObject = {{"type", {"object", "null"}}};
const json kNullableNumber = {{"type", {"number", "null"}}};

json nn(double v) { return std::isnan(v) ? json() : json(v); }

std::string opt_str(const json& a, const char* k, const std::string& d = "") {
  return a.contains(k) ? a[k].get<std::string>() : d;
}
std::vector<std::string> opt_strings(const json& a, const char* k) {
  return a.contains(k) ? a[k].get<std::vector<std::string>>() : std::vector<std::string>{};
}

json params_json(const ModelConfig& m) {
  ParamCount p = count_params(m);
  return {{"embed", p.embed},
          {"head", p.head},
          {"matrix", p.matrix},
          {"scalar", p.scalar},
          {"total", p.total()}};
}

// A run directory or checkpoint given as an experiment id, a run directory or a checkpoint file.
std::string run_or_checkpoint(AgentContext& ctx, const std::string& s) {
  if (fs::is_regular_file(s)) return s;
  return ctx.queue.resolve_run(s);
}

json leaderboard_rows(const std::vector<RunData>& runs) {
  json arr = json::array();
  int rank = 0;
  for (const RunData* r : ranked(runs))
    arr.push_back({{"rank", std::isnan(r->val_bpb()) ? json() : json(++rank)},
                   {"run", r->name},
                   {"dir", r->dir},
                   {"config", r->config_name()},
                   {"val_bpb", nn(r->val_bpb())},
                   {"core", nn(r->core())},
                   {"device_seconds", nn(r->device_seconds())},
                   {"tokens", nn(r->tokens())},
                   {"tokens_per_second", nn(r->tokens_per_second())},
                   {"params", nn(r->params())},
                   {"finished", r->finished()}});
  return arr;
}

// The runs of the queue's experiments, named by experiment id.
std::vector<RunData> queue_runs(AgentContext& ctx) {
  std::vector<RunData> runs;
  for (const auto& e : ctx.queue.list()) {
    if (!path_exists(e.run_dir() + "/metrics.jsonl")) continue;
    try {
      RunData r = load_run(e.run_dir());
      r.name = e.id;
      runs.push_back(std::move(r));
    } catch (const Error&) {
      // A run being written may be unreadable for a moment; the others still rank.
    }
  }
  return runs;
}

void add_info_tools(McpServer& s, AgentContext& ctx) {
  s.add_tool({"describe_device", "Describe the device",
              "This machine's compute and memory roofline (matmul FLOP/s in fp32 and bf16, memory "
              "bandwidth, ridge point), the machine description and the available backends. The "
              "roofline is measured once (~10 s) and cached.",
              input({{"refresh", boolean("Measure again instead of using the cached roofline")},
                     {"threads", integer("Threads to measure with (default: all)", 0)}}),
              output({{"roofline", kObject}, {"machine", kObject}, {"backends", kArray}},
                     {"roofline", "machine", "backends"}),
              true, [](const json& a) {
                int threads = a.value("threads", 0);
                Roofline r = machine_roofline(a.value("refresh", false), threads, nullptr);
                json roof = to_json(r);
                roof["ridge_flop_per_byte"] = r.ridge(true);
                roof["cache"] = roofline_cache_path(threads);
                return json{{"roofline", roof},
                            {"machine", machine_info()},
                            {"backends", available_backends()}};
              }});

  s.add_tool({"list_configs", "List presets and config keys",
              "The built-in presets (shape, parameters, FLOPs per token) and every config key with "
              "its value in one preset (keys are set with `set: [\"section.key=value\"]`; "
              "docs/CONFIG.md explains them).",
              input({{"preset", str("Preset whose key values to list (default d4)")}}),
              output({{"presets", kArray}, {"keys", kArray}, {"preset", {{"type", "string"}}}},
                     {"presets", "keys"}),
              true, [](const json& a) {
                json presets = json::array();
                for (const auto& n : preset_names()) {
                  RunConfig c = load_config(n);
                  presets.push_back(
                      {{"name", n},
                       {"n_layer", c.model.n_layer},
                       {"d_model", c.model.d_model},
                       {"n_head", c.model.n_head},
                       {"seq_len", c.model.seq_len},
                       {"vocab_size", c.model.vocab_size},
                       {"params", params_json(c.model)},
                       {"flops_per_token", flops_per_token(c.model, c.model.seq_len)}});
                }
                std::string p = opt_str(a, "preset", "d4");
                json keys = json::array();
                for (auto& [k, v] : flatten_json(to_json(load_config(p))))
                  keys.push_back({{"key", k}, {"value", v}});
                return json{{"presets", presets}, {"keys", keys}, {"preset", p}};
              }});

  s.add_tool(
      {"show_config", "Show a resolved config",
       "A preset or config file with overrides applied and validated: the full config, parameter "
       "counts by group and training FLOPs per token and per step. vocab_size 0 means the "
       "dataset's tokenizer decides (embed/head then count 0; pass vocab_size to count them).",
       input(
           {{"config", nonempty("Preset name or JSON config file")},
            {"set", strings("Overrides, each section.key=value")},
            {"vocab_size",
             integer("Vocabulary size to count with when the config leaves it to the dataset", 0)}},
           {"config"}),
       output({{"name", {{"type", "string"}}},
               {"config", kObject},
               {"params", kObject},
               {"flops_per_token", {{"type", "number"}}},
               {"flops_per_step", {{"type", "number"}}}},
              {"name", "config", "params", "flops_per_token", "flops_per_step"}),
       true, [](const json& a) {
         RunConfig c = load_config(a["config"].get<std::string>(), opt_strings(a, "set"));
         // The vocabulary counted with goes through the override and validation that
         // `--set model.vocab_size=N` does, so a value out of range is refused, not wrapped.
         RunConfig counted = c;
         if (c.model.vocab_size == 0 && a.contains("vocab_size") && a["vocab_size"] != 0) {
           apply_overrides(counted, {"model.vocab_size=" + a["vocab_size"].dump()});
           validate(counted);
         }
         const ModelConfig& m = counted.model;
         double f = flops_per_token(m, m.seq_len);
         return json{{"name", c.name},
                     {"config", to_json(c)},
                     {"params", params_json(m)},
                     {"flops_per_token", f},
                     {"flops_per_step", f * double(c.train.batch_tokens)},
                     {"batch_tokens", c.train.batch_tokens}};
       }});

  s.add_tool(
      {"prepare_data", "Prepare a dataset",
       "Tokenize text into a dataset folder (tokenizer.json, train/val shards, manifest.json), as "
       "`clocklm prepare`: inputs (.txt/.jsonl/.jsonl.zst/.jsonl.gz files, folders or globs) or a "
       "built-in preset (debian-docs). Runs to completion before answering; an existing identical "
       "preparation is reused.",
       input({{"out", nonempty("Dataset folder to write")},
              {"inputs", strings("Training text: files, folders or globs")},
              {"val", strings("Separate validation text (default: a held-out fraction)")},
              {"preset", str("Built-in corpus preset instead of inputs, e.g. debian-docs")},
              {"vocab_size",
               integer("Train a BPE tokenizer of this size (default 32768 or the preset's)", 257)},
              {"val_fraction", number("Fraction of documents held out for validation")},
              {"force", boolean("Replace a different preparation already in out")}},
             {"out"}),
       output({{"dataset", {{"type", "string"}}},
               {"vocab_size", {{"type", "integer"}}},
               {"manifest", kObject},
               {"already_prepared", {{"type", "boolean"}}}},
              {"dataset", "vocab_size", "manifest"}),
       false, [](const json& a) {
         PrepareOptions po;
         po.out = a["out"].get<std::string>();
         po.inputs = opt_strings(a, "inputs");
         po.val_inputs = opt_strings(a, "val");
         po.preset = opt_str(a, "preset");
         po.vocab_size = a.value("vocab_size", 0u);
         po.val_fraction = a.value("val_fraction", -1.0);
         po.force = a.value("force", false);
         po.quiet = true;
         if (po.inputs.empty() && po.preset.empty()) fail("prepare: give inputs or a preset");
         PrepareResult r = prepare_dataset(po);
         DatasetInfo info = read_dataset_info(po.out);
         return json{{"dataset", fs::absolute(po.out).string()},
                     {"vocab_size", info.vocab_size},
                     {"manifest", info.manifest},
                     {"already_prepared", r.already_prepared}};
       }});
}

void add_queue_tools(McpServer& s, AgentContext& ctx) {
  json exp_out = output({{"experiment", kObject}, {"queue", kObject}}, {"experiment"});
  s.add_tool(
      {"submit_experiment", "Submit an experiment",
       "Queue a training run (a config with overrides, a device-time budget, a dataset) with your "
       "hypothesis. Returns its id at once; a runner trains queued experiments one at a time on "
       "the device. Poll experiment_status, then read experiment_results. Refused when the queue's "
       "device-time cap would be exceeded. For a quick deterministic run, set train.max_steps.",
       input({{"config", nonempty("Preset name (list_configs) or JSON config file")},
              {"set", strings("Overrides, each section.key=value, e.g. optim.matrix.lr=0.03")},
              {"budget", nonempty("Device-time budget: 90s, 5m, 1.5h")},
              {"data", str("Prepared dataset folder (default: the queue's)")},
              {"hypothesis", nonempty("What you expect and why: recorded in the journal")},
              {"baseline", str("Experiment id or run directory to compare with in the journal")},
              {"name", str("Short label")},
              {"profile", boolean("Also profile three steps into RUN/profile/")},
              {"device", str("Backend: cpu | cuda[:N] | auto (default)")}},
             {"config", "budget", "hypothesis"}),
       exp_out, false, [&ctx](const json& a) {
         ExperimentSpec sp;
         sp.config = a["config"].get<std::string>();
         sp.sets = opt_strings(a, "set");
         sp.budget = a["budget"].get<std::string>();
         sp.data = opt_str(a, "data");
         sp.hypothesis = a["hypothesis"].get<std::string>();
         sp.baseline = opt_str(a, "baseline");
         sp.name = opt_str(a, "name");
         sp.profile = a.value("profile", false);
         sp.device = opt_str(a, "device", "auto");
         sp.submitter = "mcp";
         Experiment e = ctx.queue.submit(sp);
         ensure_runner(ctx.queue, ctx.exe);
         return json{{"experiment", experiment_json(e)}, {"queue", queue_status(ctx.queue)}};
       }});

  s.add_tool({"list_experiments", "List experiments",
              "Every experiment of the queue in id order with its state (queued, running, done, "
              "failed, cancelled), device time and val bpb, plus the device-time ledger.",
              input({{"state",
                      {{"type", "string"},
                       {"enum", {"queued", "running", "done", "failed", "cancelled"}},
                       {"description", "Only experiments in this state"}}}}),
              output({{"experiments", kArray}, {"ledger", kObject}}, {"experiments", "ledger"}),
              true, [&ctx](const json& a) {
                ensure_runner(ctx.queue, ctx.exe);
                json list = json::array();
                for (const auto& e : ctx.queue.list())
                  if (!a.contains("state") || e.status() == a["state"].get<std::string>())
                    list.push_back(experiment_json(e));
                return json{{"experiments", list}, {"ledger", ctx.queue.ledger().to_json()}};
              }});

  s.add_tool({"experiment_status", "Experiment or queue status",
              "With an id: that experiment's state, reason, attempts and device time so far. "
              "Always: the queue (device time spent, reserved and remaining under the cap; the "
              "runner; counts by state).",
              input({{"id", str("Experiment id, e.g. exp-0003 (omit for the queue only)")}}),
              output({{"experiment", kNullableObject}, {"queue", kObject}}, {"queue"}), true,
              [&ctx](const json& a) {
                ensure_runner(ctx.queue, ctx.exe);
                json e = a.contains("id")
                             ? experiment_json(ctx.queue.get(a["id"].get<std::string>()))
                             : json();
                return json{{"experiment", e}, {"queue", queue_status(ctx.queue)}};
              }});

  s.add_tool(
      {"cancel_experiment", "Cancel an experiment",
       "A queued experiment is cancelled at once; a running one is asked to stop (it checkpoints "
       "first) and is marked cancelled when its process has exited.",
       input({{"id", nonempty("Experiment id")}}, {"id"}), exp_out, false, [&ctx](const json& a) {
         return json{{"experiment", experiment_json(ctx.queue.cancel(a["id"].get<std::string>()))}};
       }});

  s.add_tool({"experiment_results", "Experiment results",
              "One experiment's summary.json (val bpb, tokens/s, device time, ...), the last "
              "metrics rows, the profile table when it was profiled, its journal entry (delta "
              "against its baseline) and the end of its training log.",
              input({{"id", nonempty("Experiment id")},
                     {"metrics_tail",
                      {{"type", "integer"},
                       {"minimum", 0},
                       {"maximum", 10000},
                       {"description", "Metrics rows to return (default 10)"}}}},
                    {"id"}),
              output({{"experiment", kObject},
                      {"summary", kNullableObject},
                      {"metrics_tail", kArray},
                      {"profile_table", {{"type", {"string", "null"}}}},
                      {"journal", kObject},
                      {"log_tail", {{"type", "string"}}}},
                     {"experiment", "summary", "metrics_tail", "journal"}),
              true, [&ctx](const json& a) {
                Experiment e = ctx.queue.get(a["id"].get<std::string>());
                return experiment_results(ctx.queue, e, a.value("metrics_tail", 10));
              }});

  s.add_tool({"journal", "Render the journal",
              "Writes the queue's journal.md: device-time ledger, leaderboard (table and plot) and "
              "one entry per experiment (hypothesis, config difference from its baseline, result, "
              "delta). Returns the markdown and the entries.",
              input({{"out", str("Markdown file to write (default QUEUE/journal.md)")}}),
              output({{"path", {{"type", "string"}}},
                      {"markdown", {{"type", "string"}}},
                      {"entries", kArray},
                      {"plots", kArray}},
                     {"path", "markdown", "entries"}),
              false, [&ctx](const json& a) {
                JournalFiles f = write_journal(ctx.queue, opt_str(a, "out"));
                return json{{"path", f.markdown},
                            {"markdown", read_file(f.markdown)},
                            {"entries", f.entries},
                            {"plots", f.plots},
                            {"notes", f.notes}};
              }});
}

void add_analysis_tools(McpServer& s, AgentContext& ctx) {
  s.add_tool(
      {"compare_runs", "Compare runs",
       "Two or more runs (experiment ids or run directories) side by side: the ranking, every "
       "config key that differs, and compare.md with overlaid loss, val bpb and throughput plots.",
       input({{"runs",
               {{"type", "array"},
                {"items", {{"type", "string"}}},
                {"minItems", 2},
                {"description", "Experiment ids or run directories"}}},
              {"out", str("Folder for compare.md and the plots (default QUEUE/compare/<ids>)")}},
             {"runs"}),
       output({{"ranking", kArray},
               {"config_differences", kArray},
               {"markdown", {{"type", "string"}}}},
              {"ranking", "config_differences", "markdown"}),
       false, [&ctx](const json& a) {
         std::vector<RunData> runs;
         std::string label;
         for (const auto& s : a["runs"]) {
           std::string ref = s.get<std::string>();
           RunData r = load_run(ctx.queue.resolve_run(ref));
           if (auto id = ctx.queue.find_id(ref)) r.name = *id;
           label += (label.empty() ? "" : "-") + r.name;
           runs.push_back(std::move(r));
         }
         std::string out = opt_str(a, "out", ctx.queue.dir() + "/compare/" + label);
         ReportFiles f = write_compare(runs, out);
         std::vector<json> configs;
         for (const auto& r : runs) configs.push_back(r.config);
         json diffs = json::array();
         for (const auto& kv : config_key_values(configs))
           if (kv.differs) diffs.push_back({{"key", kv.key}, {"values", kv.values}});
         return json{{"ranking", leaderboard_rows(runs)},
                     {"config_differences", diffs},
                     {"markdown", f.markdown},
                     {"plots", f.plots},
                     {"notes", f.notes}};
       }});

  s.add_tool({"leaderboard", "Leaderboard",
              "Runs ranked by final val bpb (runs without one last), with CORE, device time, "
              "tokens and tokens/s: the queue's experiments, or every run under a folder.",
              input({{"dir", str("Folder of run directories (default: the queue's experiments)")}}),
              output({{"runs", kArray}}, {"runs"}), true, [&ctx](const json& a) {
                std::vector<RunData> runs;
                if (a.contains("dir")) {
                  std::vector<std::string> errors;
                  runs = load_runs(a["dir"].get<std::string>(), &errors);
                } else {
                  runs = queue_runs(ctx);
                }
                return json{{"runs", leaderboard_rows(runs)}};
              }});

  s.add_tool(
      {"evaluate_checkpoint", "Evaluate a checkpoint",
       "Exact validation bits per byte (metric bpb) or the CORE benchmark (metric core, needs a "
       "bundle) of a run's latest checkpoint (experiment id or run directory) or of a checkpoint "
       "file.",
       input({{"run", nonempty("Experiment id, run directory or checkpoint file")},
              {"metric",
               {{"type", "string"}, {"enum", {"bpb", "core"}}, {"description", "bpb or core"}}},
              {"val_tokens", integer("bpb: target positions evaluated (default 2^20)", 1)},
              {"batch", integer("Rows per forward (default 8)", 1)},
              {"data", str("bpb: dataset folder (default: the run's)")},
              {"allow_tokenizer_mismatch",
               {{"type", "boolean"},
                {"description", "bpb: evaluate on a dataset whose tokenizer is not the one the "
                                "checkpoint was trained with (default false: refused)"}}},
              {"bundle", str("core: CORE bundle folder")},
              {"max_per_task", integer("core: at most this many items per task (0 = all)", 0)},
              {"device", str("Backend: cpu | cuda[:N] | auto")}},
             {"run", "metric"}),
       output({{"metric", {{"type", "string"}}},
               {"checkpoint", {{"type", "string"}}},
               {"result", kObject}},
              {"metric", "checkpoint", "result"}),
       true, [&ctx](const json& a) {
         std::string what = run_or_checkpoint(ctx, a["run"].get<std::string>());
         std::string metric = a["metric"].get<std::string>();
         int batch = a.value("batch", 8);
         std::string device = opt_str(a, "device", "auto");
         if (metric == "bpb") {
           LoadedModel lm = load_model_for_eval(what, batch, 0, device);
           std::string data = resolve_data_dir(lm, opt_str(a, "data"));
           Dataset ds = Dataset::open(data);
           check_tokenizer(lm, ds.tokenizer.hash(), ds.tokenizer.vocab_size(), data,
                           a.value("allow_tokenizer_mismatch", false),
                           "set allow_tokenizer_mismatch");
           BpbResult r = eval_bpb(*lm.gpt, ds, a.value("val_tokens", int64_t(1) << 20), batch,
                                  lm.cfg.model.seq_len);
           json j = r.to_json();
           j["data"] = data;
           return json{{"metric", metric}, {"checkpoint", lm.checkpoint}, {"result", j}};
         }
         if (!a.contains("bundle")) fail("eval core: a CORE bundle folder is required (bundle)");
         LoadedModel lm = load_model_for_eval(what, 1, 1, device);
         Tokenizer tok = resolve_tokenizer(lm, "", opt_str(a, "data"));
         CoreOptions co;
         co.bundle = a["bundle"].get<std::string>();
         co.max_per_task = a.value("max_per_task", 0);
         co.batch = batch;
         co.progress = false;
         return json{{"metric", metric},
                     {"checkpoint", lm.checkpoint},
                     {"result", eval_core(*lm.gpt, tok, co)}};
       }});

  s.add_tool(
      {"sample_text", "Sample text",
       "Generate text from a run's latest checkpoint (experiment id or run directory) or a "
       "checkpoint file, with a KV cache: temperature 0 is greedy.",
       input({{"run", nonempty("Experiment id, run directory or checkpoint file")},
              {"prompt", str("Prompt text")},
              {"tokens",
               {{"type", "integer"},
                {"minimum", 1},
                {"maximum", 4096},
                {"description", "New tokens (default 64)"}}},
              {"temperature",
               {{"type", "number"}, {"minimum", 0}, {"description", "Default 0.8; 0 = greedy"}}},
              {"top_k", integer("Sample among the K most likely tokens (default 50; 0 = all)", 0)},
              {"seed", integer("Random seed (default 42)", 0)},
              {"device", str("Backend: cpu | cuda[:N] | auto")}},
             {"run", "prompt"}),
       output({{"text", {{"type", "string"}}},
               {"completion", {{"type", "string"}}},
               {"checkpoint", {{"type", "string"}}}},
              {"text", "completion", "checkpoint"}),
       true, [&ctx](const json& a) {
         LoadedModel lm = load_model_for_eval(run_or_checkpoint(ctx, a["run"].get<std::string>()),
                                              1, 1, opt_str(a, "device", "auto"));
         Tokenizer tok = resolve_tokenizer(lm, "", "");
         std::string prompt = a["prompt"].get<std::string>();
         std::vector<int32_t> ids{(int32_t)tok.bos_id()};
         for (uint32_t t : tok.encode(prompt)) ids.push_back((int32_t)t);
         SampleOptions so;
         so.tokens = a.value("tokens", 64);
         so.temperature = a.value("temperature", 0.8f);
         so.top_k = a.value("top_k", 50);
         so.seed = a.value("seed", uint64_t(42));
         check_sample_options(so);
         std::vector<int32_t> out = generate(*lm.gpt, ids, so, tok.bos_id());
         std::string completion = tok.decode(std::vector<uint32_t>(out.begin(), out.end()));
         return json{{"text", prompt + completion},
                     {"completion", completion},
                     {"checkpoint", lm.checkpoint},
                     {"tokens", out.size()}};
       }});
}

}  // namespace

void add_clocklm_tools(McpServer& server, AgentContext& ctx) {
  add_info_tools(server, ctx);
  add_queue_tools(server, ctx);
  add_analysis_tools(server, ctx);
}

McpServer make_clocklm_server(AgentContext& ctx) {
  McpServer s(
      "clocklm", CLOCKLM_VERSION,
      "clocklm trains GPT language models in a fixed budget of device time and scores them by "
      "validation bits per byte (lower is better). Loop: list_configs / show_config to pick a "
      "change, submit_experiment with a hypothesis and a baseline, poll experiment_status until "
      "done, read experiment_results, compare_runs and leaderboard, and journal for the record. "
      "Training runs in a queue, one at a time, charged to a device-time ledger (experiment_status "
      "shows what is left). Docs are resources.");
  add_clocklm_tools(s, ctx);
  s.set_resources(clocklm_resources(ctx));
  return s;
}

}  // namespace clm

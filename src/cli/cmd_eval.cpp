// Subcommands of the eval area: `eval bpb`, `eval core`, `eval logits` and `sample` (docs/EVAL.md).
#include <cstdio>

#include "cli/commands.h"
#include "core/common.h"
#include "data/dataset.h"
#include "eval/bpb.h"
#include "eval/core.h"
#include "eval/logits.h"
#include "eval/model_load.h"
#include "eval/sample.h"
#include "model/gpt.h"
#include "tok/tokenizer.h"

namespace clm {

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= s.size()) {
    size_t c = s.find(',', p);
    if (c == std::string::npos) c = s.size();
    if (c > p) out.push_back(s.substr(p, c - p));
    p = c + 1;
  }
  return out;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  if (!path.empty()) atomic_write(path, j.dump(2) + "\n");
}

}  // namespace

void register_eval_commands(CLI::App& app) {
  auto* ev = app.add_subcommand("eval", "Evaluate a checkpoint: validation bits per byte, CORE");
  ev->require_subcommand(1);

  // ---- eval bpb ----
  struct BpbArgs {
    std::string checkpoint, data, json, device = "auto";
    int64_t val_tokens = 1 << 20;
    int batch = 8, seq_len = 0;
    bool allow_tokenizer_mismatch = false;
  };
  auto ba = std::make_shared<BpbArgs>();
  auto* bpb = ev->add_subcommand("bpb", "Validation bits per byte on a fixed prefix of the val split");
  bpb->add_option("--checkpoint", ba->checkpoint, "Checkpoint file")->required();
  bpb->add_option("--data", ba->data, "Prepared dataset folder (default: the run's dataset)");
  bpb->add_option("--val-tokens", ba->val_tokens, "Target positions evaluated (default 2^20)");
  bpb->add_option("--batch", ba->batch, "Rows per forward");
  bpb->add_option("--seq-len", ba->seq_len, "Row length T (default: the model's seq_len)");
  bpb->add_option("--json", ba->json, "Write the result as JSON");
  bpb->add_option("--device", ba->device, "Backend: cpu | cuda[:N] | auto")->capture_default_str();
  bpb->add_flag("--allow-tokenizer-mismatch", ba->allow_tokenizer_mismatch,
                "Evaluate on a dataset whose tokenizer is not the one the checkpoint was trained with");
  bpb->callback([ba] {
    LoadedModel lm = load_model_for_eval(ba->checkpoint, ba->batch, ba->seq_len, ba->device);
    std::string data = resolve_data_dir(lm, ba->data);
    Dataset ds = Dataset::open(data);
    check_tokenizer(lm, ds.tokenizer.hash(), ds.tokenizer.vocab_size(), data, ba->allow_tokenizer_mismatch);
    int T = ba->seq_len > 0 ? ba->seq_len : lm.cfg.model.seq_len;
    BpbResult r = eval_bpb(*lm.gpt, ds, ba->val_tokens, ba->batch, T);
    std::printf("val bpb %.6f  (%lld tokens, %lld bytes, %lld positions of %s's val split, T=%d, %.1fs)\n", r.bpb,
                (long long)r.tokens, (long long)r.bytes, (long long)r.positions, data.c_str(), T, r.seconds);
    nlohmann::json j = r.to_json();
    j["checkpoint"] = ba->checkpoint;
    j["data"] = data;
    write_json(ba->json, j);
  });

  // ---- eval core ----
  struct CoreArgs {
    std::string checkpoint, bundle, tokenizer, data, tasks, json, csv, device = "auto";
    int max_per_task = 0, batch = 8;
    bool quiet = false;
  };
  auto ca = std::make_shared<CoreArgs>();
  auto* core = ev->add_subcommand("core", "The CORE in-context benchmark (22 tasks; see docs/EVAL.md)");
  core->add_option("--checkpoint", ca->checkpoint, "Checkpoint file")->required();
  core->add_option("--bundle", ca->bundle, "CORE bundle folder (core.yaml, eval_meta_data.csv, eval_data/)")->required();
  core->add_option("--tokenizer", ca->tokenizer, "Tokenizer file or folder (default: the run's dataset)");
  core->add_option("--data", ca->data, "Dataset folder whose tokenizer to use");
  core->add_option("--max-per-task", ca->max_per_task, "At most N items per task (a quick estimate)");
  core->add_option("--tasks", ca->tasks, "Comma-separated task labels (default: all)");
  core->add_option("--batch", ca->batch, "Rows per forward");
  core->add_option("--json", ca->json, "Write per-task results and CORE as JSON");
  core->add_option("--csv", ca->csv, "Write the table in the layout of core/reference/*.csv");
  core->add_flag("--quiet", ca->quiet, "No progress on stderr");
  core->add_option("--device", ca->device, "Backend: cpu | cuda[:N] | auto")->capture_default_str();
  core->callback([ca] {
    // Built for one short row: scoring runs through KVDecoder, which sizes its own caches and the
    // model's inference scratch.
    LoadedModel lm = load_model_for_eval(ca->checkpoint, 1, 1, ca->device);
    Tokenizer tok = resolve_tokenizer(lm, ca->tokenizer, ca->data);
    CoreOptions opt;
    opt.bundle = ca->bundle;
    opt.max_per_task = ca->max_per_task;
    opt.tasks = split_commas(ca->tasks);
    opt.batch = ca->batch;
    opt.progress = !ca->quiet;
    nlohmann::json r = eval_core(*lm.gpt, tok, opt);
    std::string table = format_core_table(r);
    std::fputs(table.c_str(), stdout);
    std::printf("(%.1fs)\n", r["seconds"].get<double>());
    r["checkpoint"] = ca->checkpoint;
    write_json(ca->json, r);
    if (!ca->csv.empty()) atomic_write(ca->csv, table);
  });

  // ---- eval logits ----
  struct LogitsArgs {
    std::string checkpoint, input, out, device = "auto", precision = "fp32";
  };
  auto logits_args = std::make_shared<LogitsArgs>();
  auto* lg = ev->add_subcommand("logits", "Full logits of token rows, as raw fp32 [rows, T, vocab_size] (to compare runtimes)");
  lg->add_option("--checkpoint", logits_args->checkpoint, "Checkpoint file or run folder")->required();
  lg->add_option("--input", logits_args->input, "Token rows: one row of space-separated ids per line, all the same length")->required();
  lg->add_option("--out", logits_args->out, "Output file: little-endian fp32, row-major [rows, T, vocab_size]")->required();
  lg->add_option("--matmul-precision", logits_args->precision, "fp32 (the exact reference) | bf16 | auto (the run's)")
      ->capture_default_str();
  lg->add_option("--device", logits_args->device, "Backend: cpu | cuda[:N] | auto")->capture_default_str();
  lg->callback([logits_args] {
    std::vector<std::vector<int32_t>> rows = read_token_rows(logits_args->input);
    LoadedModel lm = load_model_for_eval(logits_args->checkpoint, 1, int(rows[0].size()), logits_args->device);
    const std::string prec = logits_args->precision == "auto" ? lm.cfg.model.matmul_precision : logits_args->precision;
    lm.gpt->set_matmul_precision(resolve_precision(prec, lm.gpt->backend()));
    std::vector<float> z = row_logits(*lm.gpt, rows);
    atomic_write(logits_args->out, std::string_view(reinterpret_cast<const char*>(z.data()), z.size() * sizeof(float)));
    std::printf("logits [%zu, %zu, %d] (fp32, %s matmuls) -> %s\n", rows.size(), rows[0].size(),
                lm.cfg.model.vocab_size, prec_name(lm.gpt->matmul_precision()), logits_args->out.c_str());
  });

  // ---- sample ----
  struct SampleArgs {
    std::string checkpoint, prompt, tokenizer, data, device = "auto";
    SampleOptions o;
    bool no_bos = false, stop = false;
  };
  auto sa = std::make_shared<SampleArgs>();
  auto* smp = app.add_subcommand("sample", "Generate text from a checkpoint (KV cache)");
  smp->add_option("--checkpoint", sa->checkpoint, "Checkpoint file")->required();
  smp->add_option("--prompt", sa->prompt, "Prompt text")->required();
  smp->add_option("--tokens", sa->o.tokens, "New tokens to generate");
  smp->add_option("--temperature", sa->o.temperature, "0 = greedy");
  smp->add_option("--top-k", sa->o.top_k, "Sample among the K most likely tokens (0 = all)");
  smp->add_option("--seed", sa->o.seed, "Random seed");
  smp->add_option("--tokenizer", sa->tokenizer, "Tokenizer file or folder (default: the run's dataset)");
  smp->add_option("--data", sa->data, "Dataset folder whose tokenizer to use");
  smp->add_flag("--stop-at-bos", sa->stop, "Stop at the end-of-document token");
  smp->add_option("--device", sa->device, "Backend: cpu | cuda[:N] | auto")->capture_default_str();
  smp->callback([sa] {
    check_sample_options(sa->o);  // before the model is loaded
    LoadedModel lm = load_model_for_eval(sa->checkpoint, 1, 1, sa->device);  // generation uses a KVDecoder
    Tokenizer tok = resolve_tokenizer(lm, sa->tokenizer, sa->data);
    std::vector<int32_t> prompt{(int32_t)tok.bos_id()};
    for (uint32_t id : tok.encode(sa->prompt)) prompt.push_back((int32_t)id);
    sa->o.stop_at_bos = sa->stop;
    std::vector<int32_t> out = generate(*lm.gpt, prompt, sa->o, tok.bos_id());
    std::vector<uint32_t> ids(out.begin(), out.end());
    if (sa->stop && !ids.empty() && ids.back() == tok.bos_id()) ids.pop_back();
    std::printf("%s%s\n", sa->prompt.c_str(), tok.decode(ids).c_str());
  });
}

}  // namespace clm

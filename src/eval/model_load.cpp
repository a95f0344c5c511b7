// Checkpoint -> GPT for evaluation, plus the dataset/tokenizer the run used (see model_load.h).
#include "eval/model_load.h"

#include <cstdio>
#include <filesystem>

#include "core/common.h"
#include "core/json_parse.h"
#include "checkpoint/checkpoint.h"

namespace clm {

namespace fs = std::filesystem;

LoadedModel load_model_for_eval(const std::string& path, int max_B, int max_T, const std::string& device) {
  LoadedModel m;
  if (!path_exists(path)) fail("checkpoint {} does not exist", path);
  m.checkpoint = fs::is_directory(path) ? latest_checkpoint(path) : path;
  uint64_t weight_bytes = 0;
  m.meta = read_checkpoint_meta(m.checkpoint, &weight_bytes);
  m.cfg = checkpoint_config(m.meta, weight_bytes, m.checkpoint);  // before the model is allocated
  fs::path rd = fs::path(m.checkpoint).parent_path().parent_path();
  if (!rd.empty() && fs::exists(rd / "run.json")) {
    m.run_dir = rd.string();
    // The run record is optional for evaluation: an unreadable one counts as absent.
    if (!try_parse_json(read_file((rd / "run.json").string()), m.run)) m.run = nullptr;
  }
  int T = max_T > 0 ? max_T : m.cfg.model.seq_len;
  m.device = make_backend(device);
  m.gpt = std::make_unique<GPT>(m.cfg.model, std::max(1, max_B), T, *m.device);
  load_checkpoint_weights(m.checkpoint, *m.gpt);  // verified; the optimizer state is not needed
  m.gpt->weights_changed();
  m.gpt->set_grad_enabled(false);
  return m;
}

static std::string run_dataset_dir(const LoadedModel& m) {
  if (m.run.is_object() && m.run.contains("dataset") && m.run["dataset"].is_object() &&
      m.run["dataset"].contains("dir") && m.run["dataset"]["dir"].is_string())
    return m.run["dataset"]["dir"].get<std::string>();
  return "";
}

std::string resolve_data_dir(const LoadedModel& m, const std::string& data_flag) {
  if (!data_flag.empty()) return data_flag;
  std::string d = run_dataset_dir(m);
  if (d.empty()) fail("no dataset: pass --data DIR (checkpoint {} is not inside a run folder with run.json)", m.checkpoint);
  if (!path_exists(d)) fail("the run's dataset {} no longer exists; pass --data DIR", d);
  return d;
}

std::string tokenizer_source(const LoadedModel& m, const std::string& tokenizer_flag, const std::string& data_flag) {
  if (!tokenizer_flag.empty()) return tokenizer_flag;
  if (!data_flag.empty()) return data_flag;
  return run_dataset_dir(m);
}

Tokenizer resolve_tokenizer(const LoadedModel& m, const std::string& tokenizer_flag, const std::string& data_flag) {
  const std::string src = tokenizer_source(m, tokenizer_flag, data_flag);
  if (tokenizer_flag.empty() && data_flag.empty()) {
    if (src.empty())
      fail("no tokenizer: pass --tokenizer PATH or --data DIR (checkpoint {} is not inside a run folder with run.json)",
           m.checkpoint);
    if (!path_exists(src)) fail("the run's dataset {} no longer exists; pass --tokenizer PATH or --data DIR", src);
  }
  Tokenizer tok = Tokenizer::load(src);
  check_tokenizer(m, tok.hash(), tok.vocab_size(), src, /*allow_mismatch=*/true);
  return tok;
}

std::string trained_tokenizer_hash(const LoadedModel& m) {
  if (m.meta.is_object() && m.meta.contains("tokenizer_hash") && m.meta["tokenizer_hash"].is_string() &&
      !m.meta["tokenizer_hash"].get<std::string>().empty())
    return m.meta["tokenizer_hash"].get<std::string>();
  if (m.run.is_object() && m.run.contains("dataset") && m.run["dataset"].is_object() &&
      m.run["dataset"].contains("tokenizer_hash") && m.run["dataset"]["tokenizer_hash"].is_string())
    return m.run["dataset"]["tokenizer_hash"].get<std::string>();
  return "";
}

void check_tokenizer(const LoadedModel& m, const std::string& hash, int64_t vocab_size, const std::string& src,
                     bool allow_mismatch, const std::string& allow_hint) {
  if (vocab_size > (int64_t)m.cfg.model.vocab_size)
    fail("tokenizer {} has {} ids but the model's vocabulary is {}", src, vocab_size, m.cfg.model.vocab_size);
  const std::string trained = trained_tokenizer_hash(m);
  if (trained.empty() || trained == hash) return;
  if (allow_mismatch) {
    std::fprintf(stderr, "warning: tokenizer %s (hash %s) is not the one the run was trained with (%s)\n", src.c_str(),
                 hash.c_str(), trained.c_str());
    return;
  }
  fail("tokenizer {} (hash {}, {} ids) is not the one {} was trained with (hash {}); {} to use it anyway", src, hash,
       vocab_size, m.checkpoint, trained, allow_hint.empty() ? "pass --allow-tokenizer-mismatch" : allow_hint);
}

}  // namespace clm

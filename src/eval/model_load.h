// Opening a trained model for evaluation: a checkpoint file (or a run folder, meaning its latest
// checkpoint) gives the RunConfig and the weights; the tokenizer and dataset default to the ones the
// run recorded in RUN/run.json. Used by `eval bpb`, `eval core` and `sample`.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "model/gpt.h"
#include "tok/tokenizer.h"

namespace clm {

struct LoadedModel {
  std::string checkpoint;          // the file actually read
  std::string run_dir;             // RUN (the checkpoint's grandparent folder), "" if not a run layout
  nlohmann::json meta;             // the checkpoint's metadata (step, tokens, ...)
  nlohmann::json run;              // RUN/run.json, or null
  RunConfig cfg;
  std::shared_ptr<Backend> device; // where the model lives
  std::unique_ptr<GPT> gpt;        // weights loaded; gradients disabled
};

// max_B rows per forward; max_T = 0 means the model's seq_len; device as --device (cpu, cuda, auto).
LoadedModel load_model_for_eval(const std::string& checkpoint_or_run, int max_B, int max_T = 0,
                                const std::string& device = "auto");
// --data if given, else the dataset the run recorded; throws Error naming what is missing.
std::string resolve_data_dir(const LoadedModel& m, const std::string& data_flag);
// Where resolve_tokenizer reads the tokenizer from: --tokenizer, else --data, else the run's
// dataset folder; "" when none is known.
std::string tokenizer_source(const LoadedModel& m, const std::string& tokenizer_flag, const std::string& data_flag);
// --tokenizer if given, else the tokenizer of --data, else of the run's dataset. Checks it with
// check_tokenizer, warning (not refusing) when its hash differs from the trained one.
Tokenizer resolve_tokenizer(const LoadedModel& m, const std::string& tokenizer_flag, const std::string& data_flag);
// The hash of the tokenizer the model was trained with: the checkpoint metadata's, else the run's
// record in run.json; "" when neither records one.
std::string trained_tokenizer_hash(const LoadedModel& m);
// Checks a tokenizer (its hash and number of ids; `src` names its file or dataset) against the
// model: more ids than the model's vocabulary is always refused (they would index past the
// embedding); a hash other than trained_tokenizer_hash is refused, naming `allow_hint` as the way
// to proceed, unless allow_mismatch, which only warns on stderr.
void check_tokenizer(const LoadedModel& m, const std::string& hash, int64_t vocab_size, const std::string& src,
                     bool allow_mismatch, const std::string& allow_hint = "");

}  // namespace clm

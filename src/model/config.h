// Run configuration: model shape, optimizer groups and training-loop settings, loaded from a preset
// name or a JSON file plus `--set key=value` overrides. Keys are documented in docs/CONFIG.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clm {

struct ModelConfig {
  int n_layer = 8;
  int d_model = 512;
  int n_head = 8;
  int n_kv_head = 8;          // < n_head: grouped-query attention; 1: multi-query
  int head_dim = 64;          // n_head*head_dim need not equal d_model
  float mlp_ratio = 4.0f;     // hidden = mlp_ratio * d_model (rounded to a multiple of 64)
  std::string activation = "relu2";  // relu2 | gelu | swiglu
  float norm_eps = 1e-6f;     // RMSNorm epsilon (norms carry no learned gain unless norm_gain)
  bool norm_gain = false;
  float rope_base = 10000.0f;
  bool qk_norm = true;
  bool tie_embeddings = false;
  float logit_softcap = 15.0f;  // 0 = off; logits = c*tanh(z/c)
  int vocab_size = 0;         // 0 = take it from the dataset's tokenizer
  int seq_len = 1024;
  float init_std = 0.02f;     // embeddings; hidden matrices use init_std, output projections scaled
  bool zero_init_out = true;  // zero-init attention/MLP output projections and the LM head
  int padded_vocab() const { return (vocab_size + 63) / 64 * 64; }
  int mlp_hidden() const;
};

struct OptimGroup {            // hyper-parameters of one parameter group
  std::string kind = "adamw";  // adamw | muon
  float lr = 0.0f;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float momentum = 0.95f;      // muon
  bool nesterov = true;        // muon
  int ns_steps = 5;            // muon Newton-Schulz iterations
  float weight_decay = 0.0f;
  bool ns_bf16 = true;         // muon: Newton-Schulz matmuls in bf16 (fp32 accumulate); false = fp32
};

// Defaults are those of baseline-50m (d_model 512); presets rescale the AdamW learning rates.
struct OptimConfig {
  OptimGroup matrix{.kind = "muon", .lr = 0.02f};                      // 2-D hidden matrices
  OptimGroup embed{.kind = "adamw", .lr = 0.245f, .beta1 = 0.8f, .eps = 1e-10f};     // token embedding
  OptimGroup head{.kind = "adamw", .lr = 0.0049f, .beta1 = 0.8f, .eps = 1e-10f};    // output head
  OptimGroup scalar{.kind = "adamw", .lr = 0.02f, .beta1 = 0.8f, .eps = 1e-10f};   // gains, scalars
  float grad_clip = 1.0f;  // 0 = off
};

struct TrainConfig {
  int64_t batch_tokens = 8192;   // total tokens per optimizer step (grad accumulation to reach it)
  int micro_batch = 4;           // rows per forward/backward
  double budget_seconds = 600;   // device-time budget
  float warmup_frac = 0.0f;      // of the budget
  float warmdown_frac = 0.4f;    // linear decay to final_lr_frac over the last fraction
  float final_lr_frac = 0.0f;
  float muon_momentum_warmup_frac = 0.1f;  // momentum ramps 0.85 -> momentum over this fraction
  double eval_every_seconds = 120;  // periodic val bpb, in budget seconds (0 = only at the end)
  int64_t val_tokens = 1 << 20;
  double checkpoint_every_seconds = 300;
  int log_every = 1;             // steps between metrics.jsonl rows
  uint64_t seed = 1337;
  int threads = 0;               // 0 = default_threads()
  // Added by the training loop (see docs/CONFIG.md):
  float muon_momentum_start = 0.85f;  // Muon momentum at the start of its warmup
  std::string wd_schedule = "linear"; // constant | linear (to 0 at the end) | lr (follows the lr scale)
  int64_t max_steps = 0;         // > 0: deterministic mode, schedules over steps, stop at max_steps
  int64_t periodic_val_tokens = 131072;  // tokens of each periodic val bpb (the final uses val_tokens)
  int eval_batch = 0;            // rows per eval forward (0 = micro_batch)
  int keep_checkpoints = 1;      // newest checkpoints kept in RUN/checkpoints
};

struct RunConfig {
  std::string name = "custom";   // preset name or config file stem
  ModelConfig model;
  OptimConfig optim;
  TrainConfig train;
};

// Preset names (baseline-50m, d4..d20, byte-11m, ...) or a path to a .json config file, then overrides
// "section.key=value" (or a unique bare "key=value"). Unknown keys and invalid values throw Error.
RunConfig load_config(const std::string& name_or_path, const std::vector<std::string>& overrides = {});
void validate(const RunConfig& cfg);  // throws Error with a one-line message
nlohmann::json to_json(const RunConfig& cfg);
RunConfig run_config_from_json(const nlohmann::json& j);  // strict: unknown keys throw
std::vector<std::string> preset_names();
// Stable fingerprint of what determines the training math (model, optim, batch, seed, schedule
// shape); excludes run-length and bookkeeping keys (budget, max_steps, eval/checkpoint cadence,
// log_every, threads, name) so a resumed run may extend its budget. Stored in checkpoints.
uint64_t config_hash(const RunConfig& cfg);

// Parameter counts computed analytically from the shape (no allocation).
struct ParamCount {
  int64_t embed = 0, head = 0, matrix = 0, scalar = 0;
  int64_t total() const { return embed + head + matrix + scalar; }
};
ParamCount count_params(const ModelConfig& m);

}  // namespace clm

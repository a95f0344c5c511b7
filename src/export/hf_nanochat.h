// The `hf` export format: Hugging Face transformers' `nanochat` model type (NanoChatForCausalLM),
// written only when the run's model maps onto that architecture exactly. The mapping (names,
// shapes, the RoPE sign, the embedding norm nanochat has and clocklm has not, the vocabulary) and
// what is refused are in docs/FORMATS.md.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "export/export_model.h"
#include "model/config.h"

namespace clm {

// Every model option nanochat lacks, one short phrase each ("model.x0_skips (embedding skips)");
// empty when the config maps.
std::vector<std::string> hf_nanochat_refusals(const ModelConfig& m);

// The tensors transformers loads, made from clocklm's, and the one norm eps they are computed
// with: nanochat's residual stream is 2^-residual_shift times clocklm's (see hf_nanochat.cpp).
struct HfNanochat {
  std::vector<SafeTensor> tensors;
  float rms_norm_eps = 0;
  int residual_shift = 0;
};
HfNanochat hf_nanochat_model(const ExportSource& src);
// config.json and generation_config.json; bos_id: the tokenizer's document separator.
nlohmann::json hf_nanochat_config(const ModelConfig& m, float rms_norm_eps, int bos_id, SafeDType dt);
nlohmann::json hf_generation_config(int bos_id);

// Refuses (one line naming every option) or writes config.json, generation_config.json,
// model.safetensors and the tokenizer files into `dir`.
void write_hf_nanochat(const ExportSource& src, const std::string& dir, SafeDType dt);

}  // namespace clm

// The `safetensors` export format: clocklm's own parameter names and shapes in model.safetensors,
// the model config in clocklm_config.json and the tokenizer in clocklm's format, so every
// architecture option clocklm trains is represented (python/clocklm_torch.py computes with it).
// Layout in docs/FORMATS.md.
#pragma once
#include <map>
#include <string>

#include "export/export_model.h"

namespace clm {

void write_clocklm_export(const ExportSource& src, const std::string& dir, SafeDType dt);

// The `__metadata__` every exported model.safetensors carries: format "pt" (transformers refuses a
// file without it) and where the weights came from.
std::map<std::string, std::string> export_safetensors_metadata(const ExportSource& src, const std::string& layout);

}  // namespace clm

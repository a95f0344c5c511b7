// The `onnx` export format: model.onnx (export/onnx.h: input_ids -> logits, fp32, every
// architecture option) and its generation variant model_with_past.onnx (keys and values in and
// out), with the model config in clocklm_config.json and the tokenizer in clocklm's format, as the
// safetensors format writes them. Layout in docs/FORMATS.md.
#pragma once
#include <string>

#include "export/export_model.h"

namespace clm {

// Writes the four files into `dir`; refuses --dtype bf16 in one line (the graph computes in fp32
// and stores fp32 weights).
void write_onnx_export(const ExportSource& src, const std::string& dir, SafeDType dt);

}  // namespace clm

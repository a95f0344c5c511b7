// `clocklm export`: a checkpoint or run folder written as safetensors (clocklm's names), as
// Hugging Face transformers' nanochat layout, as ONNX, or any other format in export_formats()
// (src/export/export_model.h; the formats are described in docs/FORMATS.md).
#include <cstdio>

#include "cli/commands.h"
#include "core/common.h"
#include "export/export_model.h"

namespace clm {

void register_export_commands(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  std::string formats;
  for (const ExportFormat& f : export_formats()) formats += "\n  " + f.name + ": " + f.summary;
  auto* ex = app.add_subcommand("export", "Write a trained model in a format other tools load (safetensors, "
                                          "Hugging Face, ONNX); never half-written");
  ex->add_option("--checkpoint", o->checkpoint, "Checkpoint file, or a run folder (its latest checkpoint)")->required();
  ex->add_option("--format", o->format, "Output format:" + formats)->required();
  ex->add_option("--out", o->out, "Destination folder (created; must be empty or absent unless --force)")->required();
  ex->add_option("--dtype", o->dtype, "Stored weight type: fp32 | bf16")->capture_default_str();
  ex->add_option("--tokenizer", o->tokenizer, "Tokenizer file or folder (default: the run's dataset)");
  ex->add_option("--data", o->data, "Dataset folder whose tokenizer to use");
  ex->add_flag("--force", o->force, "Replace a non-empty --out folder (only once the new one is complete)");
  ex->callback([o] {
    std::vector<std::string> files = export_model(*o);
    std::printf("exported %s as %s (%s) to %s:", o->checkpoint.c_str(), o->format.c_str(), o->dtype.c_str(),
                o->out.c_str());
    for (const std::string& f : files) std::printf(" %s", f.c_str());
    std::printf("\n");
  });
}

}  // namespace clm

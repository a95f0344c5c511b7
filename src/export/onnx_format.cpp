// The `onnx` export format (see onnx_format.h).
#include "export/onnx_format.h"

#include <filesystem>

#include "core/common.h"
#include "export/onnx.h"

namespace clm {

void write_onnx_export(const ExportSource& src, const std::string& dir, SafeDType dt) {
  namespace fs = std::filesystem;
  if (dt != SafeDType::F32)
    fail("export: the onnx format stores fp32 weights (its graph computes in fp32); drop --dtype bf16");
  write_onnx(src.cfg.model, src.params, (fs::path(dir) / "model.onnx").string());
  write_onnx(src.cfg.model, src.params, (fs::path(dir) / "model_with_past.onnx").string(), 0, true);
  write_json_file(dir, "clocklm_config.json", export_config_json(src, dt));
  if (src.tokenizer) src.tokenizer->save((fs::path(dir) / "clocklm_tokenizer.json").string());
}

}  // namespace clm

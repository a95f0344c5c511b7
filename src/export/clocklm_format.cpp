// The `safetensors` export format (see clocklm_format.h).
#include "export/clocklm_format.h"

#include <filesystem>

#include "core/common.h"

namespace clm {

std::map<std::string, std::string> export_safetensors_metadata(const ExportSource& src, const std::string& layout) {
  return {{"format", "pt"},
          {"clocklm_layout", layout},
          {"clocklm_version", CLOCKLM_VERSION},
          {"clocklm_step", src.meta.value("step", nlohmann::json(0)).dump()}};
}

void write_clocklm_export(const ExportSource& src, const std::string& dir, SafeDType dt) {
  namespace fs = std::filesystem;
  write_safetensors((fs::path(dir) / "model.safetensors").string(), src.params, dt,
                    export_safetensors_metadata(src, "clocklm"));
  write_json_file(dir, "clocklm_config.json", export_config_json(src, dt));
  if (src.tokenizer) src.tokenizer->save((fs::path(dir) / "clocklm_tokenizer.json").string());
}

}  // namespace clm

// The export driver: loading a checkpoint for export and writing a format into place atomically
// (see export_model.h). The formats themselves are in clocklm_format.cpp, hf_nanochat.cpp and
// onnx_format.cpp.
#include "export/export_model.h"

#include <algorithm>
#include <filesystem>

#include "core/common.h"
#include "core/folder_guard.h"
#include "core/folder_swap.h"
#include "eval/model_load.h"
#include "export/clocklm_format.h"
#include "export/export_folder.h"
#include "export/hf_nanochat.h"
#include "export/onnx_format.h"
#include "model/gpt.h"

namespace clm {

namespace fs = std::filesystem;

const SafeTensor* ExportSource::find(const std::string& name) const {
  for (const SafeTensor& t : params)
    if (t.name == name) return &t;
  return nullptr;
}

const SafeTensor& ExportSource::param(const std::string& name) const {
  const SafeTensor* t = find(name);
  if (!t) fail("export: checkpoint {} has no parameter {}", checkpoint, name);
  return *t;
}

const std::vector<ExportFormat>& export_formats() {
  static const std::vector<ExportFormat> formats = {
      {"safetensors", "model.safetensors with clocklm's parameter names, clocklm_config.json, the tokenizer",
       write_clocklm_export},
      {"hf", "Hugging Face transformers' nanochat layout (config.json, model.safetensors, tokenizer)",
       write_hf_nanochat},
      {"onnx", "model.onnx (opset 17: input_ids -> logits, fp32), model_with_past.onnx (keys/values in "
                "and out, for generation), clocklm_config.json, the tokenizer",
       write_onnx_export},
  };
  return formats;
}

namespace {

// A `.NAME.tmp.PID` file is what atomic_write (core/common.h) writes before renaming it into place.
bool is_write_in_progress(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.starts_with(".") && name.find(".tmp.") != std::string::npos;
}

const ExportFormat& find_format(const std::string& name) {
  std::string names;
  for (const ExportFormat& f : export_formats()) {
    if (f.name == name) return f;
    names += (names.empty() ? "" : ", ") + f.name;
  }
  fail("export: unknown format '{}' ({})", name, names);
}

std::vector<std::string> list_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != kExportMarker)
      out.push_back(fs::relative(e.path(), dir).string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

ExportSource load_export_source(const std::string& path, const std::string& tokenizer_flag,
                                const std::string& data_flag) {
  if (!path_exists(path)) fail("export: checkpoint {} does not exist", path);
  if (is_write_in_progress(fs::path(path)))
    fail("export: {} is a checkpoint still being written (the temporary file of an atomic write); export the "
         "run folder or a finished step_*.ckpt", path);
  LoadedModel lm = load_model_for_eval(path, 1, 1, "cpu");  // verifies header, checksum, parameter table
  ExportSource src;
  src.checkpoint = lm.checkpoint;
  src.meta = lm.meta;
  src.cfg = lm.cfg;
  for (const Param& p : lm.gpt->params()) {
    SafeTensor t{p.name, p.shape, std::vector<float>(size_t(p.numel()))};
    p.to_host(t.data.data());
    src.params.push_back(std::move(t));
  }
  src.tokenizer = resolve_tokenizer(lm, tokenizer_flag, data_flag);
  src.inputs = {path, src.checkpoint, tokenizer_source(lm, tokenizer_flag, data_flag)};
  return src;
}

std::vector<std::string> export_model(const ExportOptions& o) {
  const ExportFormat& format = find_format(o.format);
  const SafeDType dt = safe_dtype_from_name(o.dtype);
  if (o.out.empty()) fail("export: --out DIR is required");
  fs::path target = fs::absolute(fs::path(o.out)).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();
  refuse_unsafe_target("export", o.out, target, {o.checkpoint, o.tokenizer, o.data});
  FolderWrite write(target, "export folder " + o.out);
  check_export_target(target, o.out, o.force);
  ExportSource src = load_export_source(o.checkpoint, o.tokenizer, o.data);
  refuse_unsafe_target("export", o.out, target, src.inputs);
  format.write(src, write.temp().string(), dt);
  write_export_marker(write.temp(), format.name);
  write.commit();
  return list_files(target);
}

nlohmann::json json_float(float v) { return std::stod(fmt::format("{}", v)); }

void write_json_file(const std::string& dir, const std::string& name, const nlohmann::json& j) {
  atomic_write((fs::path(dir) / name).string(), j.dump(2) + "\n");
}

nlohmann::json export_config_json(const ExportSource& src, SafeDType dt) {
  nlohmann::json run = to_json(src.cfg);
  nlohmann::json model = run["model"];
  model["norm_eps"] = json_float(src.cfg.model.norm_eps);
  model["rope_base"] = json_float(src.cfg.model.rope_base);
  model["logit_softcap"] = json_float(src.cfg.model.logit_softcap);
  model["padded_vocab"] = src.cfg.model.padded_vocab();
  model["mlp_hidden"] = src.cfg.model.mlp_hidden();
  nlohmann::json j = {{"format", "clocklm-export"},
                      {"format_version", 1},
                      {"model", model},
                      {"dtype", dt == SafeDType::F32 ? "fp32" : "bf16"},
                      {"source",
                       {{"checkpoint", src.checkpoint},
                        {"step", src.meta.value("step", nlohmann::json())},
                        {"tokens", src.meta.value("tokens", nlohmann::json())},
                        {"config_hash", src.meta.value("config_hash", nlohmann::json())},
                        {"clocklm_version", CLOCKLM_VERSION}}},
                      {"run_config", run}};
  if (src.tokenizer)
    j["tokenizer"] = {{"file", "clocklm_tokenizer.json"},
                      {"hash", src.tokenizer->hash()},
                      {"vocab_size", src.tokenizer->vocab_size()},
                      {"bos_id", src.tokenizer->bos_id()}};
  return j;
}

}  // namespace clm

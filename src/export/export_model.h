// Taking a trained model out of clocklm (`clocklm export`): the checkpoint is read and verified
// like any evaluation load, its weights and config gathered on the host (ExportSource), and one
// format writer fills a temporary folder beside the destination, which is renamed into place only
// once complete, so a failure (a refused option, a full disk, a signal) leaves nothing half-written.
// Formats are a table of name -> writer (export_formats()); docs/FORMATS.md describes each.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "export/safetensors.h"
#include "tok/tokenizer.h"

namespace clm {

// A checkpoint's model on the host: every parameter in GPT::params() order, with clocklm's names
// and shapes, fp32 (the master weights), plus what was trained with it.
struct ExportSource {
  std::string checkpoint;        // the file read
  nlohmann::json meta;           // the checkpoint's metadata (step, tokens, config, ...)
  RunConfig cfg;
  std::vector<SafeTensor> params;
  std::optional<Tokenizer> tokenizer;  // the run's (or --tokenizer / --data's)
  std::vector<std::string> inputs;     // the paths read: checkpoint, run folder, tokenizer source
  const SafeTensor* find(const std::string& name) const;  // nullptr if absent
  const SafeTensor& param(const std::string& name) const;  // throws Error if absent
};

// Reads and verifies a checkpoint file, or a run folder's latest checkpoint. Refuses, in one line,
// a missing path and a checkpoint still being written (a `.NAME.tmp.PID` file of an atomic write).
// The tokenizer comes from `tokenizer_flag`, else `data_flag`'s dataset, else the run's dataset.
ExportSource load_export_source(const std::string& checkpoint_or_run, const std::string& tokenizer_flag,
                                const std::string& data_flag);

// A format writer: fills `dir` (an empty folder that exists) from `src` in dtype `dt`. It throws
// Error, in one line, for a model it cannot represent exactly; the caller then removes `dir`.
using ExportWriter = std::function<void(const ExportSource& src, const std::string& dir, SafeDType dt)>;
struct ExportFormat {
  std::string name;     // the --format value
  std::string summary;  // one line for --help
  ExportWriter write;
};
const std::vector<ExportFormat>& export_formats();

struct ExportOptions {
  std::string checkpoint;    // a checkpoint file or a run folder
  std::string format;        // a name in export_formats()
  std::string out;           // the destination folder
  std::string dtype = "fp32";  // fp32 | bf16: the stored weights' type
  std::string tokenizer, data; // where the tokenizer comes from when not the run's dataset
  bool force = false;        // replace a non-empty `out`
};
// The whole export: checks the options, loads the source, writes `format` and the marker
// (export_folder.h) into a temporary folder beside `out` and swaps it into place (FolderWrite,
// core/folder_swap.h). A non-empty `out` is replaced only with force and only when it is an earlier
// export; the current folder and any folder holding an input are never replaced
// (core/folder_guard.h). Returns the files written, sorted, without the marker.
std::vector<std::string> export_model(const ExportOptions& o);

// Shared by the writers: the model config as clocklm_config.json holds it (see docs/FORMATS.md).
nlohmann::json export_config_json(const ExportSource& src, SafeDType dt);
// Writes `j` (pretty-printed) to `dir`/`name`.
void write_json_file(const std::string& dir, const std::string& name, const nlohmann::json& j);
// A float as JSON with its shortest decimal spelling (1e-06, not 9.99999997e-07).
nlohmann::json json_float(float v);

}  // namespace clm

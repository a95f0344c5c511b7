// Built-in corpora made from English text that Debian packages ship (`clocklm prepare --preset`),
// so a fresh machine can train without downloading anything. Contents are listed in docs/DATA.md;
// the packages are in scripts/corpus-packages.txt (installed by scripts/setup.sh).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/corpus.h"

namespace clm {

struct Preset {
  std::string name, description;
  uint32_t vocab_size;   // default tokenizer size when --vocab-size is not given
  double val_fraction;   // default held-out fraction when --val-fraction is not given
};

const std::vector<Preset>& presets();
const Preset& find_preset(const std::string& name);  // throws Error listing the known names

// The preset's source files on this machine, sorted. Throws Error naming the Debian package to
// install when one is missing.
std::vector<std::string> preset_files(const std::string& name);

// Documents of the preset's files (each file is cut into documents according to its kind: info
// nodes, fortunes, jargon entries, manual sections). Same contract as for_each_document.
void for_each_preset_document(const std::vector<std::string>& files,
                              const std::function<bool(std::string_view doc)>& fn, CorpusStats* stats = nullptr);

// Exposed for tests: how one file's text is cut into documents.
std::vector<std::string> split_info(std::string_view text);      // GNU info: one document per node
std::vector<std::string> split_fortunes(std::string_view text);  // fortune(6) data: "%" lines separate
std::vector<std::string> split_jargon(std::string_view text);    // Jargon File: one document per entry

}  // namespace clm

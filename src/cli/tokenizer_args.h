// The command-line options that say how to read a tokenizer (--pattern, --special, --bos,
// --add-bos), shared by the tokenizer commands and `prepare`.
#pragma once
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/common.h"
#include "tok/tokenizer.h"

namespace clm {

struct TokenizerArgs {
  std::string pattern, bos, add_bos;
  std::vector<std::string> special;  // NAME=ID

  TokenizerOptions options() const {
    TokenizerOptions o;
    o.pattern = pattern;
    o.bos = bos;
    o.add_bos = add_bos;
    for (const std::string& s : special) {
      size_t eq = s.rfind('=');
      const std::string id = eq == std::string::npos ? "" : s.substr(eq + 1);
      if (eq == std::string::npos || eq == 0 || id.empty() || id.size() > 9 ||
          id.find_first_not_of("0123456789") != std::string::npos)
        fail("--special {}: expected NAME=ID", s);
      o.specials.emplace_back(s.substr(0, eq), uint32_t(std::stoul(id)));
    }
    return o;
  }
};

inline void add_tokenizer_args(CLI::App* cmd, TokenizerArgs& a) {
  cmd->add_option("--pattern", a.pattern,
                  "split pattern of a .tiktoken rank file: gpt2, r50k_base, p50k_base, cl100k_base, o200k_base, clocklm "
                  "or a regex (default: from the file name)");
  cmd->add_option("--special", a.special, "special token NAME=ID of a .tiktoken rank file (repeatable)");
  cmd->add_option("--bos", a.bos, "the special token that separates documents (default: chosen automatically)");
  cmd->add_option("--add-bos", a.add_bos, "add this special token as the document separator (extends the vocabulary)");
}

}  // namespace clm

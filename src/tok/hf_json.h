// Hugging Face tokenizer.json: reading the byte-level BPE kind (docs/TOKENIZER.md says what is
// accepted and what is refused) and writing any clocklm tokenizer in it, for the reference
// libraries and `clocklm export --format hf`.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "tok/tokenizer.h"

namespace clm {

// A parsed tokenizer.json; `what` names it in errors (one line naming the unsupported component
// or option, or the malformed part).
Tokenizer parse_hf_tokenizer(const nlohmann::json& j, const std::string& what, const TokenizerOptions& opt = {});
// The same from the file's text.
Tokenizer parse_hf_tokenizer_text(std::string_view text, const std::string& what, const TokenizerOptions& opt = {});

// The tokenizer.json and tokenizer_config.json texts for a tokenizer: a BPE model over GPT-2's
// byte-level alphabet, pre-split by its pattern (Split, then ByteLevel without its own regex), its
// special tokens as added tokens. Throws Error if the vocabulary cannot be written so (two ids
// that spell the same bytes).
std::string hf_tokenizer_json(const Tokenizer& t);
std::string hf_tokenizer_config_json(const Tokenizer& t);
// Writes dir/tokenizer.json and dir/tokenizer_config.json (each atomically; dir is created).
void write_hf_tokenizer(const Tokenizer& t, const std::string& dir);

}  // namespace clm

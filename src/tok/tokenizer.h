// The tokenizer interface every other module uses: byte-level BPE loaded from clocklm's own format,
// GPT-2's encoder.json + vocab.bpe, a Hugging Face tokenizer.json, a tiktoken rank file or a
// pickled tiktoken Encoding (nanochat's tokenizer.pkl). The formats are in docs/TOKENIZER.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace clm {

struct TokenizerImpl;  // defined in tok/*.cpp

// How to read a tokenizer beyond its own file (docs/TOKENIZER.md, "Loading").
struct TokenizerOptions {
  // A .tiktoken rank file's split pattern: gpt2, r50k_base, p50k_base, cl100k_base, o200k_base,
  // clocklm, or a regex. Empty: from the file's name (cl100k_base.tiktoken), else an error.
  std::string pattern;
  // Special tokens of a .tiktoken file (NAME, id); empty: the named encoding's published ones.
  std::vector<std::pair<std::string, uint32_t>> specials;
  std::string bos;      // the document separator by name; empty: chosen automatically
  std::string add_bos;  // add this special token (id = vocabulary size) as the document separator
};

struct Tokenizer {
  // Load from a file or a folder: clocklm's tokenizer file, a Hugging Face tokenizer.json (told
  // apart by content), GPT-2's encoder.json + vocab.bpe, a .tiktoken rank file, a pickled tiktoken
  // Encoding (.pkl); a folder holds tokenizer.json, tokenizer.pkl, GPT-2's two files or one
  // .tiktoken file. Throws Error naming the problem.
  static Tokenizer load(const std::string& path, const TokenizerOptions& opt = {});
  // Parse the text of a clocklm tokenizer file; `what` names it in errors. Checks every size
  // against the file's own content before allocating for it.
  static Tokenizer from_json(std::string_view text, const std::string& what);

  // Encode text to ids (no BOS added). Exact byte-level: decode(encode(s)) == s for any bytes.
  std::vector<uint32_t> encode(std::string_view text) const;
  // Encode many documents in parallel (order preserved).
  std::vector<std::vector<uint32_t>> encode_batch(const std::vector<std::string_view>& docs) const;
  // Decode ids to bytes; special tokens decode to their names (e.g. "<|bos|>").
  std::string decode(const std::vector<uint32_t>& ids) const;

  uint32_t vocab_size() const;  // including special tokens
  uint32_t bos_id() const;      // the document separator
  std::string bos_name() const;
  // "bpe" (trained by clocklm), "gpt2", "hf" (tokenizer.json) or "tiktoken" (rank file or pickle).
  std::string kind() const;
  const std::vector<std::pair<std::string, uint32_t>>& special_tokens() const;  // name, id
  // Byte length of each id's decoded text; 0 for special tokens. Used by bits-per-byte.
  const std::vector<uint32_t>& token_bytes() const;
  // Content hash (hex) of the tokenizer definition; stored in manifests and checkpoints.
  std::string hash() const;
  // Save in clocklm's format (atomically).
  void save(const std::string& path) const;

  std::shared_ptr<const TokenizerImpl> impl;
};

}  // namespace clm

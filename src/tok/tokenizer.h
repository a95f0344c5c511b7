// The tokenizer interface every other module uses: byte-level BPE (clocklm's own format) or GPT-2's
// encoder.json + vocab.bpe. The file format is in docs/TOKENIZER.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace clm {

struct TokenizerImpl;  // defined in tok/*.cpp

struct Tokenizer {
  // Load from a clocklm tokenizer file, or from a folder holding either `tokenizer.json`
  // (clocklm format) or GPT-2's `encoder.json` + `vocab.bpe`. Throws Error naming the problem.
  static Tokenizer load(const std::string& path);
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
  // Byte length of each id's decoded text; 0 for special tokens. Used by bits-per-byte.
  const std::vector<uint32_t>& token_bytes() const;
  // Content hash (hex) of the tokenizer definition; stored in manifests and checkpoints.
  std::string hash() const;
  // Save in clocklm's format (atomically).
  void save(const std::string& path) const;

  std::shared_ptr<const TokenizerImpl> impl;
};

}  // namespace clm

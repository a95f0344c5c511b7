// `clocklm prepare`: corpus files (or a built-in preset) -> a prepared dataset folder with a
// tokenizer, train/val token shards and manifest.json (docs/FORMATS.md, docs/DATA.md).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tok/tokenizer.h"

namespace clm {

struct PrepareOptions {
  std::vector<std::string> inputs;      // files, folders, globs (train text)
  std::vector<std::string> val_inputs;  // separate validation text; else a held-out fraction
  double val_fraction = -1;             // < 0: default (1%, or the preset's)
  uint32_t vocab_size = 0;              // train a tokenizer of this size; 0: 32768 (or the preset's)
  std::string tokenizer;                // use this tokenizer (any format Tokenizer::load reads)
  TokenizerOptions tokenizer_options;   // how to read it (--pattern, --special, --bos, --add-bos)
  int64_t tokenizer_max_chars = 1'000'000'000;  // train the tokenizer on at most this much text
  std::string out;
  uint64_t shard_tokens = 100'000'000;  // tokens per shard (a shard never splits a document)
  uint64_t txt_doc_bytes = 0;           // > 0: cut .txt inputs at blank lines into documents this big
  std::string text_column = "text";     // the column of .parquet inputs that holds the documents
  bool force = false;                   // replace a different preparation in `out`
  std::string preset;                   // build the corpus from a built-in preset instead of inputs
  int threads = 0;                      // 0: default_threads()
  bool quiet = false;                   // no progress lines
};

struct PrepareResult {
  bool already_prepared = false;
  nlohmann::json manifest;
};

// Deterministic: the same inputs and parameters give byte-identical shards and tokenizer,
// whatever the thread count. Throws Error on bad input; never leaves a half-written `out`.
PrepareResult prepare_dataset(const PrepareOptions& opt);

// Whether a document goes to the held-out validation split under --val-fraction: a fixed function
// of its content (so duplicates land on the same side and input order does not matter).
bool held_out(std::string_view doc, double val_fraction);

// The 64-bit content hash used for input files in the manifest and for held_out(): 8 bytes per
// step (xor-multiply-rotate), little-endian, zero-padded tail, seeded with the length, murmur3
// finaliser. Fast enough (~GB/s) that hashing never shows up next to decompression.
uint64_t content_hash64(const void* data, size_t n);

}  // namespace clm

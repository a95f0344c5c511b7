// BPE trainer interface: learns merges from documents with incremental pair counts.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tok/tokenizer.h"

namespace clm {

struct BpeTrainOptions {
  uint32_t vocab_size = 32768;       // total, special tokens included
  int64_t max_chars = 2'000'000'000; // stop reading training text after this many bytes
  int threads = 0;                   // 0 = default_threads()
  std::vector<std::string> special_tokens = {"<|bos|>"};  // the trainer appends reserved ones
  bool verbose = false;              // progress on stderr
};

Tokenizer train_bpe(const std::vector<std::string_view>& docs, const BpeTrainOptions& opt);

}  // namespace clm

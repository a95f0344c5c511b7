// A prepared dataset folder (output of `clocklm prepare`): tokenizer, manifest, train/val shards.
// Layout and the shard binary format are documented in docs/FORMATS.md. Owned by issue 3.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tok/tokenizer.h"

namespace clm {

// One memory-mapped token shard. Validates magic, version, width and size on open.
struct Shard {
  static Shard open(const std::string& path);  // throws Error on missing/corrupt/truncated file
  uint64_t size() const { return n_tokens; }
  uint32_t at(uint64_t i) const { return width == 2 ? ((const uint16_t*)data)[i] : ((const uint32_t*)data)[i]; }

  std::string path;
  uint32_t width = 2;       // bytes per token: 2 or 4
  uint64_t n_tokens = 0;
  const void* data = nullptr;  // points into the mapping, past the header
  std::shared_ptr<void> mapping;  // keeps the mmap alive
};

// Write tokens as a shard (atomically). width is chosen from vocab_size (2 if it fits in uint16).
void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, uint32_t vocab_size);

struct Dataset {
  static Dataset open(const std::string& dir);  // reads manifest.json + tokenizer; throws Error
  std::string dir;
  nlohmann::json manifest;
  Tokenizer tokenizer;
  std::vector<std::string> train_shards;  // sorted paths
  std::vector<std::string> val_shards;
};

}  // namespace clm

// A prepared dataset folder (output of `clocklm prepare`): tokenizer, manifest, train/val shards.
// Layout and the shard binary format are documented in docs/FORMATS.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
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
  uint32_t vocab_size = 0;  // of the tokenizer that wrote it (header field)
  const void* data = nullptr;  // points into the mapping, past the header
  std::shared_ptr<void> mapping;  // keeps the mmap alive
};

// The fields of a shard's 32-byte header, validated against the file's size (magic, version,
// width, and n_tokens * width == size - 32 exactly). Throws Error naming `what`.
struct ShardHeader {
  uint32_t width = 2;
  uint64_t n_tokens = 0;
  uint32_t vocab_size = 0;
};
ShardHeader parse_shard_header(const void* data, uint64_t file_size, const std::string& what);

// Write tokens as a shard (atomically). width is chosen from vocab_size (2 if it fits in uint16).
void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, uint32_t vocab_size);

// Streaming shard writer (what write_shard and `prepare` use): tokens go to a hidden temp file next
// to `path`; finish() patches the header, fsyncs and renames. Destroying an unfinished writer
// removes the temp file, so an interrupted write never leaves a shard behind.
struct ShardWriter {
  ShardWriter(const std::string& path, uint32_t vocab_size);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  void append(const uint32_t* tokens, size_t n);  // throws Error if a token is >= vocab_size
  void finish();
  std::string path, tmp;
  uint32_t vocab_size, width;
  uint64_t n_tokens = 0;
  int fd = -1;
  std::vector<char> buf;
};

constexpr uint32_t kShardVersion = 1;
constexpr size_t kShardHeaderBytes = 32;
inline uint32_t shard_width_for(uint32_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

// What the loader needs from a prepared folder without loading the tokenizer: manifest, shard
// paths (in order) and the BOS id. Throws Error when the folder is not a prepared dataset.
struct DatasetInfo {
  std::string dir;
  nlohmann::json manifest;
  std::vector<std::string> train_shards, val_shards;
  uint32_t bos_id = 0, vocab_size = 0;
  std::string tokenizer_hash;
  const std::vector<std::string>& shards(const std::string& split) const;  // "train" or "val"
};
DatasetInfo read_dataset_info(const std::string& dir);
// The manifest part of read_dataset_info, from manifest.json's text (shard files not checked).
DatasetInfo parse_dataset_manifest(std::string_view text, const std::string& dir);

struct Dataset {
  static Dataset open(const std::string& dir);  // reads manifest.json + tokenizer; throws Error
  std::string dir;
  nlohmann::json manifest;
  Tokenizer tokenizer;
  std::vector<std::string> train_shards;  // sorted paths
  std::vector<std::string> val_shards;
};

}  // namespace clm

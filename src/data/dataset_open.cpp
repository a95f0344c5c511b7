// Dataset::open: a prepared folder with its tokenizer loaded. Kept apart from dataset.cpp so that
// the shard and manifest code links without the tokenizer.
#include <filesystem>

#include "core/common.h"
#include "data/dataset.h"

namespace clm {

Dataset Dataset::open(const std::string& dir) {
  DatasetInfo info = read_dataset_info(dir);
  Dataset d;
  d.dir = dir;
  d.manifest = std::move(info.manifest);
  std::string tpath = (std::filesystem::path(dir) / "tokenizer.json").string();
  if (!path_exists(tpath)) fail("dataset {} is incomplete: {} is missing", dir, tpath);
  d.tokenizer = Tokenizer::load(tpath);
  if (!info.tokenizer_hash.empty() && d.tokenizer.hash() != info.tokenizer_hash)
    fail("dataset {}: tokenizer.json (hash {}) is not the tokenizer its manifest names (hash {})", dir,
         d.tokenizer.hash(), info.tokenizer_hash);
  d.train_shards = std::move(info.train_shards);
  d.val_shards = std::move(info.val_shards);
  return d;
}

}  // namespace clm

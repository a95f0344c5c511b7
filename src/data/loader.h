// The training/eval data loader: memory-maps shards and yields B rows of T+1 tokens, every row
// starting at a BOS; deterministic per seed and epoch; rank-sharded; resumable; prefetching.
// See docs/DATA.md for packing rules.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clm {

struct LoaderOptions {
  std::string dir;            // prepared dataset folder
  std::string split = "train";  // "train" or "val"
  int B = 1, T = 1024;
  uint64_t seed = 1337;
  int rank = 0, world = 1;    // data parallelism: rank r reads blocks r, r+world, ... of B rows
  bool shuffle = true;        // false for validation: rows in file order, no epochs of shuffling
  bool loop = true;           // false: next() returns false once the split is exhausted
  bool prefetch = true;       // background thread fills the next batch
};

struct LoaderImpl;
struct DataLoader {
  explicit DataLoader(const LoaderOptions& opt);
  ~DataLoader();
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;
  // Fills inputs[B*T] and targets[B*T] (targets = inputs shifted by one within each T+1 row).
  // Returns false only when loop=false and no full batch is left.
  bool next(int32_t* inputs, int32_t* targets);
  // Position for checkpoints; restore() makes the following next() calls identical.
  nlohmann::json state() const;
  void restore(const nlohmann::json& st);
  // The state a rank of a `world`-rank job restores to continue exactly where the ranks that wrote
  // `states` (one per rank, in rank order, batches of B rows) stopped: the same rows, dealt anew.
  // Possible when every rank stopped at the same row (true after each optimizer step) and the rows
  // consumed so far fill whole blocks of B rows for every new rank; otherwise an Error says why.
  static nlohmann::json resplit_state(const std::vector<nlohmann::json>& states, int world, int B);
  // Size of the split as this loader sees it (all ranks together).
  uint64_t rows() const;     // rows of T+1 tokens (see docs/DATA.md for how they are cut)
  uint64_t tokens() const;   // tokens in the split's shards
  double epoch() const;      // epochs consumed so far (fractional; counts all ranks' rows)
  std::unique_ptr<LoaderImpl> impl;
};

}  // namespace clm

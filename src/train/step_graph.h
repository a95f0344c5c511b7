// Recorded training steps: a step's ops queued once under Backend::record (a CUDA graph on a GPU)
// and replayed as one launch on later steps whose ops would be the same. What makes two steps'
// ops the same is their key: the model's buffers (GPT::memory_epoch), the micro-batch count and
// shape, the heads' divisors (passed to the loss ops as values) and where the scalars go; every
// value that changes from step to step (tokens, learning rates, step counts) is in device memory,
// written before the step's ops (train_step stages it).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace clm {

// train.graph: off | auto (record where the backend can, single process) | on (the same, and a
// step that cannot be recorded is an error).
enum class GraphMode { Off, Auto, On };
GraphMode graph_mode_from_name(const std::string& name);  // throws Error on anything else
const char* graph_mode_name(GraphMode m);

struct StepKey {
  uint64_t memory_epoch = 0;
  int B = 0, T = 0;
  const double* scalars = nullptr;
  const void* opt = nullptr;
  std::vector<std::pair<int64_t, int64_t>> counts;  // per micro-batch: targets of each head
  bool operator==(const StepKey&) const = default;
};

class StepGraph {
 public:
  explicit StepGraph(GraphMode mode = GraphMode::Auto) : mode_(mode) {}
  GraphMode mode() const { return mode_; }
  // Whether steps on `be` go through recordings in this mode.
  bool active(const Backend& be) const { return mode_ != GraphMode::Off && be.can_record(); }
  // Queues one step's ops, which `issue` queues one by one: the replay of the recording of this
  // key; else `issue` itself, and the second step of a key records it and replays the recording
  // (the first has then allocated every buffer and chosen every kernel the ops use). A recording
  // that fails is said once on stderr and the key is queued op by op from then on (mode On: the
  // Error propagates); one the backend reports stale is recorded again.
  void run(Backend& be, const StepKey& key, const std::function<void()>& issue);

  struct Stats {
    int64_t replayed = 0, recorded = 0, unrecorded = 0, failed = 0;
  };
  const Stats& stats() const { return stats_; }
  // The recordings kept (at most kKeep keys, the least recently used dropped).
  int64_t kept() const { return int64_t(entries_.size()); }
  static constexpr size_t kKeep = 4;

 private:
  struct Entry {
    StepKey key;
    std::unique_ptr<Recording> rec;  // null: not recorded (yet)
    bool seen = false;               // queued op by op once
    bool failed = false;             // recording failed: queued op by op
  };
  Entry& entry(const StepKey& key);
  void record(Backend& be, Entry& e, const std::function<void()>& issue);

  GraphMode mode_;
  std::vector<Entry> entries_;  // most recently used last
  Stats stats_;
  bool said_ = false;
};

}  // namespace clm

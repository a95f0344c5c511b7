// Checkpoints: one binary file holding the weights, the optimizer state and the trainer's state
// (TrainState: step, tokens, budget used, data positions), guarded by a header, the config hash and a
// checksum, written atomically. Format in docs/CHECKPOINT.md.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "config/config.h"

namespace clm {

struct GPT;
struct Optimizer;

constexpr uint32_t kCheckpointVersion = 1;
constexpr char kCheckpointMagic[8] = {'C', 'L', 'M', 'C', 'K', 'P', 'T', '\0'};
constexpr size_t kCheckpointHeaderBytes = 48;

// Writes `path` atomically. `state` is the trainer's JSON state (step, tokens, loader, ...); the
// config, its hash and the parameter table are added here.
void save_checkpoint(const std::string& path, const RunConfig& cfg, GPT& model, const Optimizer& opt,
                     const nlohmann::json& state);

// Verifies the file (magic, version, sizes, checksum, config hash, parameter table), then restores
// the weights and the optimizer and returns the trainer state. Nothing is modified when any check
// fails; every failure is an Error with a one-line message naming the file and the problem.
nlohmann::json load_checkpoint(const std::string& path, const RunConfig& cfg, GPT& model, Optimizer& opt);

// For evaluation: the same verification (minus the config hash: batch or seed may differ), then
// restores the weights only; the optimizer state is skipped. Returns the metadata.
nlohmann::json load_checkpoint_weights(const std::string& path, GPT& model);

// Reads only the header and metadata (no verification of the payload): for `runs`, tools and tests.
// The header's sizes are checked against the file size; `weight_bytes` receives the weights' size.
nlohmann::json read_checkpoint_meta(const std::string& path, uint64_t* weight_bytes = nullptr);

// A checkpoint's bytes checked (header sizes against the size, checksum, metadata is a JSON object)
// but not applied to any model; `what` names it in errors. weights/optim point into `blob`.
struct CheckpointView {
  uint64_t config_hash = 0;
  nlohmann::json meta;
  std::string_view weights, optim;
};
CheckpointView parse_checkpoint(std::string_view blob, const std::string& what);
// The trailing checksum of a checkpoint whose bytes before it are data[0, n).
uint64_t checkpoint_checksum(const char* data, size_t n);

// The run config in a checkpoint's metadata, validated and checked against the weight size its
// header declares (which the file size bounds) before anything is sized from it.
RunConfig checkpoint_config(const nlohmann::json& meta, uint64_t weight_bytes, const std::string& what);

// RUN/checkpoints/<name> of the newest checkpoint, from RUN/checkpoints/latest; throws if none.
std::string latest_checkpoint(const std::string& run_dir);

}  // namespace clm

// Checkpoints: one binary file holding the weights, the optimizer state and the trainer's state
// (step, tokens, budget used, data position, RNG), guarded by a header, the config hash and a
// checksum, written atomically. Format in docs/CHECKPOINT.md.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.h"

namespace clm {

struct GPT;
struct Optimizer;

constexpr uint32_t kCheckpointVersion = 1;

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
nlohmann::json read_checkpoint_meta(const std::string& path);

// RUN/checkpoints/<name> of the newest checkpoint, from RUN/checkpoints/latest; throws if none.
std::string latest_checkpoint(const std::string& run_dir);

}  // namespace clm

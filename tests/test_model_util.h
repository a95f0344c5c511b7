// Shared fixtures for the tests that build a model in memory: a tiny ModelConfig whose shape a test
// states with designated initializers (only what differs from the defaults), random token ids, and
// the Muon setup the whole-step tests train with.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/common.h"
#include "model/config.h"
#include "optim/optim_config.h"

namespace model_test {

// The shape of a tiny model: two layers, grouped-query attention, a padded vocabulary. Fields left
// out keep ModelConfig's defaults.
struct TinyShape {
  int n_layer = 2;
  int d_model = 64;
  int n_head = 4;
  int n_kv_head = 2;
  int head_dim = 16;
  float mlp_ratio = 4.0f;
  int vocab_size = 96;
  int seq_len = 32;
};

inline clm::ModelConfig tiny_config(const TinyShape& s = {}) {
  clm::ModelConfig c;
  c.n_layer = s.n_layer;
  c.d_model = s.d_model;
  c.n_head = s.n_head;
  c.n_kv_head = s.n_kv_head;
  c.head_dim = s.head_dim;
  c.mlp_ratio = s.mlp_ratio;
  c.vocab_size = s.vocab_size;
  c.seq_len = s.seq_len;
  return c;
}

// n token ids drawn uniformly from [0, V), repeatable from the seed.
inline std::vector<int32_t> random_tokens(size_t n, int V, uint64_t seed) {
  clm::Rng r(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(r.next() % uint64_t(V));
  return t;
}

// Muon on the matrices with Newton-Schulz at `ns_precision`, and learning rates for the embedding
// and head that move a tiny model visibly within a few steps.
inline clm::OptimConfig muon_optim(const std::string& ns_precision) {
  clm::OptimConfig o;
  o.matrix.ns_precision = ns_precision;
  o.embed.lr = 0.05f;
  o.head.lr = 0.01f;
  return o;
}

}  // namespace model_test

// Next-token choice (temperature, top-k) shared by the KV-cache and the reference generators.
#include "eval/sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "eval/finite_output.h"

namespace clm {

namespace {

void check_temperature(float t) {
  if (t < 0 || !std::isfinite(t)) fail("sample: temperature must be a finite number >= 0 (got {})", t);
}

}  // namespace

void check_sample_options(const SampleOptions& opt) {
  if (opt.tokens < 0) fail("sample: --tokens must be >= 0");
  if (opt.top_k < 0) fail("sample: top-k must be >= 0 (0 = the whole vocabulary), got {}", opt.top_k);
  check_temperature(opt.temperature);
}

int32_t sample_token(const float* logits, int V, float temperature, int top_k, Rng& rng) {
  if (V <= 0) fail("sample: empty vocabulary");
  check_temperature(temperature);
  for (int i = 0; i < V; i++) require_finite_output(logits[i], "sample", "logit");
  if (temperature == 0.0f) {
    int best = 0;
    for (int i = 1; i < V; i++)
      if (logits[i] > logits[best]) best = i;
    return best;
  }
  std::vector<int> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  int k = (top_k > 0 && top_k < V) ? top_k : V;
  // Ties broken by id, so the candidate set and its order never depend on the sort algorithm.
  auto by_logit = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (k < V) std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), by_logit);
  else std::sort(idx.begin(), idx.end(), by_logit);
  double mx = logits[idx[0]];
  std::vector<double> p(k);
  double z = 0;
  for (int i = 0; i < k; i++) {
    p[i] = std::exp(((double)logits[idx[i]] - mx) / temperature);
    z += p[i];
  }
  double u = rng.uniform() * z, c = 0;
  for (int i = 0; i < k; i++) {
    c += p[i];
    if (u < c) return idx[i];
  }
  return idx[k - 1];
}

}  // namespace clm

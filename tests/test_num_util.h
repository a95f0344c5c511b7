// Numeric test data shared by the kernel tests: seeded normal vectors and float64 copies for the
// references.
#pragma once
#include <cstdint>
#include <vector>

#include "core/common.h"

namespace num_test {

inline std::vector<float> randn(size_t n, uint64_t seed, float s = 1.0f) {
  clm::Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = s * r.normal();
  return v;
}

inline std::vector<double> to_d(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

}  // namespace num_test

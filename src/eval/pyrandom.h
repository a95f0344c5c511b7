// A bit-exact re-implementation of the parts of CPython's `random` module that the CORE benchmark's
// published numbers depend on: MT19937 seeded from an integer the way CPython seeds it
// (init_by_array with the key [seed]), getrandbits, _randbelow, shuffle and sample. The reference
// evaluator shuffles each task with Random(1337) and draws few-shot examples with
// Random(1234 + i).sample(...); replicating the algorithms makes item order and shot choice identical.
#pragma once
#include <cstdint>
#include <cstddef>
#include <utility>
#include <vector>

namespace clm {

struct PyRandom {
  explicit PyRandom(uint64_t seed);  // == random.Random(seed) for 0 <= seed < 2^64
  uint32_t genrand_uint32();         // one raw MT19937 output
  uint32_t getrandbits(int k);       // 0 <= k <= 32, as random.getrandbits(k)
  uint64_t randbelow(uint64_t n);    // as Random._randbelow_with_getrandbits(n), n > 0, n < 2^32
  // random.shuffle(x): Fisher-Yates from the back, j = randbelow(i + 1).
  template <typename T>
  void shuffle(std::vector<T>& x) {
    for (size_t i = x.size(); i-- > 1;) {
      size_t j = (size_t)randbelow(i + 1);
      std::swap(x[i], x[j]);
    }
  }
  // random.sample(population, k): CPython's pool algorithm for small populations, rejection
  // with a "selected" set otherwise (the threshold depends on k exactly as in CPython).
  std::vector<int64_t> sample(const std::vector<int64_t>& population, int k);
  // The same draw as sample(range(n), k): positions into a population of n, without building it.
  std::vector<int64_t> sample_positions(int64_t n, int k);

 private:
  uint32_t mt[624];
  int mti = 625;
  void init_genrand(uint32_t s);
  void init_by_array(const uint32_t* key, int len);
};

}  // namespace clm

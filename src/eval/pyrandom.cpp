// MT19937 and CPython's random.shuffle / random.sample, bit for bit (see pyrandom.h for why).
#include "eval/pyrandom.h"

#include <cmath>
#include <unordered_set>

#include "core/common.h"

namespace clm {

void PyRandom::init_genrand(uint32_t s) {
  mt[0] = s;
  for (mti = 1; mti < 624; mti++)
    mt[mti] = 1812433253u * (mt[mti - 1] ^ (mt[mti - 1] >> 30)) + (uint32_t)mti;
}

void PyRandom::init_by_array(const uint32_t* key, int len) {
  init_genrand(19650218u);
  int i = 1, j = 0;
  for (int k = (624 > len ? 624 : len); k; k--) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
    i++, j++;
    if (i >= 624) { mt[0] = mt[623]; i = 1; }
    if (j >= len) j = 0;
  }
  for (int k = 623; k; k--) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
    i++;
    if (i >= 624) { mt[0] = mt[623]; i = 1; }
  }
  mt[0] = 0x80000000u;  // MSB is 1, assuring a non-zero initial array
}

PyRandom::PyRandom(uint64_t seed) {
  // CPython splits abs(seed) into 32-bit words, least significant first; zero gives the key [0].
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  init_by_array(key, (seed >> 32) ? 2 : 1);
}

uint32_t PyRandom::genrand_uint32() {
  static const uint32_t mag01[2] = {0u, 0x9908b0dfu};
  uint32_t y;
  if (mti >= 624) {
    int kk;
    for (kk = 0; kk < 624 - 397; kk++) {
      y = (mt[kk] & 0x80000000u) | (mt[kk + 1] & 0x7fffffffu);
      mt[kk] = mt[kk + 397] ^ (y >> 1) ^ mag01[y & 1u];
    }
    for (; kk < 623; kk++) {
      y = (mt[kk] & 0x80000000u) | (mt[kk + 1] & 0x7fffffffu);
      mt[kk] = mt[kk + (397 - 624)] ^ (y >> 1) ^ mag01[y & 1u];
    }
    y = (mt[623] & 0x80000000u) | (mt[0] & 0x7fffffffu);
    mt[623] = mt[396] ^ (y >> 1) ^ mag01[y & 1u];
    mti = 0;
  }
  y = mt[mti++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

uint32_t PyRandom::getrandbits(int k) {
  if (k < 0 || k > 32) fail("PyRandom::getrandbits: k={} outside 0..32", k);
  if (k == 0) return 0;
  return genrand_uint32() >> (32 - k);
}

uint64_t PyRandom::randbelow(uint64_t n) {
  if (n == 0 || n > 0xffffffffull) fail("PyRandom::randbelow: n={} outside 1..2^32-1", n);
  int k = 64 - __builtin_clzll(n);  // n.bit_length()
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

std::vector<int64_t> PyRandom::sample(const std::vector<int64_t>& population, int k) {
  std::vector<int64_t> pos = sample_positions((int64_t)population.size(), k);
  for (auto& p : pos) p = population[p];
  return pos;
}

std::vector<int64_t> PyRandom::sample_positions(int64_t n, int k) {
  if (k < 0 || k > n) fail("sample larger than population or is negative (k={}, n={})", k, n);
  std::vector<int64_t> result(k);
  int64_t setsize = 21;  // size of a small set minus size of an empty list (CPython's heuristic)
  if (k > 5) setsize += (int64_t)std::pow(4.0, std::ceil(std::log((double)k * 3) / std::log(4.0)));
  if (n <= setsize) {
    std::vector<int64_t> pool(n);
    for (int64_t i = 0; i < n; i++) pool[i] = i;
    for (int i = 0; i < k; i++) {
      int64_t j = (int64_t)randbelow((uint64_t)(n - i));
      result[i] = pool[j];
      pool[j] = pool[n - i - 1];  // move the non-selected item into the vacancy
    }
  } else {
    std::unordered_set<int64_t> selected;
    for (int i = 0; i < k; i++) {
      int64_t j = (int64_t)randbelow((uint64_t)n);
      while (selected.count(j)) j = (int64_t)randbelow((uint64_t)n);
      selected.insert(j);
      result[i] = j;
    }
  }
  return result;
}

}  // namespace clm

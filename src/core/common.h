// Small shared utilities: the user-facing error type, atomic file writes, durations, clocks and
// hashing. Everything here is dependency-free so every module can include it.
#pragma once
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace clm {

// An error the user caused or can fix (bad path, malformed config, corrupt file, NaN loss).
// main() prints "clocklm: error: <what>" on one line and exits with status 1.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A loss or gradient that is NaN or infinite: the training loop names the step and the last good
// checkpoint when it sees one.
struct NonFiniteError : Error {
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// Write `data` to `path` atomically: temp file in the same folder, fsync, rename, fsync folder.
// A reader sees either the old file or the complete new one, never a torn write.
void atomic_write(const std::string& path, std::string_view data);
// Read a whole file; throws Error naming the path if it cannot be read.
std::string read_file(const std::string& path);
// Create a directory and its parents (no error if it exists).
void make_dirs(const std::string& path);
bool path_exists(const std::string& path);

// "90", "90s", "30m", "1.5h" -> seconds. Throws Error on malformed or negative input.
double parse_duration(std::string_view s);
// Monotonic wall clock in seconds.
double now_seconds();
// The best rate `work / seconds` of `body` over repeated runs after one warm-up run: at least 3
// runs and at least `min_seconds` in all (at most 10,000 runs). For peak-throughput measurements.
double best_rate(const std::function<void()>& body, double work, double min_seconds);

// 64-bit FNV-1a, for cheap content fingerprints (tokenizer hash, config hash).
uint64_t fnv1a64(const void* data, size_t n, uint64_t seed = 0xcbf29ce484222325ULL);
std::string hex64(uint64_t v);

// Number of worker threads: CLOCKLM_THREADS or OMP_NUM_THREADS if set, else hardware cores.
int default_threads();

// Small deterministic RNG (xoshiro256**), serialisable for checkpoints.
struct Rng {
  uint64_t s[4];
  explicit Rng(uint64_t seed = 0);
  uint64_t next();
  double uniform();        // [0,1)
  float normal();          // N(0,1), Box-Muller
};

}  // namespace clm

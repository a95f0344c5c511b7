// Profile analysis: turns the OpEvents a Profiler recorded into per-op aggregates against this
// machine's roofline (achieved FLOP/s and GB/s, arithmetic intensity, fraction of the roofline
// bound, compute- or memory-bound), a sorted table, profile.json and a Chrome trace (trace.json,
// opens in Perfetto or chrome://tracing).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/profiler.h"
#include "profile/roofline.h"

namespace clm {

// Minimum work of common op shapes, for ProfScope's flops/bytes arguments and for tests.
struct OpCost {
  double flops = 0, bytes = 0;
};
// C[M,N] (+)= A[M,K] B[K,N]: 2MNK FLOPs; reads A and B once, writes C once (reads it too when
// accumulating). Element sizes in bytes (4 fp32, 2 bf16).
OpCost matmul_cost(int64_t M, int64_t N, int64_t K, int a_bytes = 4, int b_bytes = 4, int c_bytes = 4,
                   bool accumulate = false);
// n elements, `reads` input streams and `writes` output streams of `elem_bytes` each,
// `flops_per_elem` FLOPs per element.
OpCost elementwise_cost(int64_t n, int reads, int writes, double flops_per_elem, int elem_bytes = 4);
// Causal attention forward over B x H heads of T positions with head dim D (flash-style: scores
// never stored): QK^T and PV over the T(T+1)/2 visible pairs = 4 D T(T+1)/2 FLOPs per head;
// reads Q, K, V and writes O (4 B H T D elements).
OpCost attention_fwd_cost(int64_t B, int64_t H, int64_t T, int64_t D, int elem_bytes = 4);

struct OpStats {
  std::string name, phase;
  int64_t count = 0;
  double seconds = 0;          // self time summed over all calls (children excluded)
  double flops = 0, bytes = 0; // summed over all calls
  double share = 0;            // seconds / measured time
  double intensity = 0;        // flops / bytes (0 when bytes == 0)
  double flops_per_s = 0, bytes_per_s = 0;
  double bound_seconds = 0;    // what the roofline allows: max(flops / peak, bytes / bandwidth)
  double roof_fraction = 0;    // bound_seconds / seconds (1 = at the roof)
  std::string bound;           // "compute" | "memory" | "" (no FLOP/byte counts, e.g. gap)
};

struct ProfileSummary {
  int steps = 0;
  double measured_seconds = 0;  // wall time of the profiled steps (all of them)
  double op_seconds = 0;        // sum of top-level op times within the measured time
  double gap_seconds = 0;       // measured - op time: work outside any scope (loop, data, sync)
  double total_flops = 0, total_bytes = 0;
  std::vector<OpStats> ops;     // sorted by time, descending; last row "(gap)" when gap > 0
  std::vector<OpStats> phases;  // fwd / bwd / optim / other totals
  Roofline roof;
  bool bf16_roof = true;        // compute roof = bf16 matmul peak (else fp32)
  double peak_flops() const { return bf16_roof ? roof.peak_flops() : roof.fp32_flops; }
};

// measured_seconds: wall time of the profiled steps; if <= 0 it is taken from prof.steps, and if
// those are absent from the span of the events. steps: how many steps the events cover (per-step
// numbers divide by it; prof.steps.size() wins when present).
ProfileSummary analyze_profile(const Profiler& prof, double measured_seconds, int steps, const Roofline& roof,
                               bool bf16_roof = true);
std::string format_profile_table(const ProfileSummary& s, int top = 30);
nlohmann::json profile_json(const ProfileSummary& s);
// Chrome trace event format: {"traceEvents": [{name, cat, ph: "X", ts, dur (microseconds), pid, tid,
// args}], "displayTimeUnit": "ms"}; steps (if marked) on their own thread track.
nlohmann::json chrome_trace(const Profiler& prof);

// For `train --profile` and `profile`: analyses `prof`, writes DIR/profile.json, DIR/trace.json and
// DIR/profile.txt (the table) atomically, and returns the summary. `roof` null: this machine's cached
// roofline (measured once, ~10 s, if there is no cache yet).
ProfileSummary write_profile(const Profiler& prof, const std::string& dir, double measured_seconds, int steps = 1,
                             const Roofline* roof = nullptr);

}  // namespace clm

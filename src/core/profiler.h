// Per-op profiler. Each profiled op opens a ProfScope with its FLOPs and bytes moved; with no
// profiler attached (nullptr) a scope costs one branch. Callers such as the model do not time ops
// themselves: they open ProfRegions that name what the ops inside them are for ("matmul.qkv",
// phase "fwd"), and whoever times the ops (a ProfScope's caller) takes its name and phase from the
// innermost open region.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace clm {

struct OpEvent {
  const char* name;    // op name, e.g. "matmul.qkv", "attn.fwd" (static string)
  const char* phase;   // "fwd" | "bwd" | "optim" | "other"
  double start, end;   // seconds (steady clock; CUDA events on the GPU)
  double flops;        // floating-point operations done by the op
  double bytes;        // bytes read + written (minimum traffic computed from shapes)
  const char* op = nullptr;  // the backend op timed ("gemm"; backend/profiled_backend.h), else null
};

// Collects OpEvents from ProfScopes opened on one thread (the thread driving the step; ops may use
// OpenMP inside a scope). Scopes may nest: the analysis charges each op its self time, so nested
// scopes never count twice. Analysis and output: profile/profile_report.h.
struct Profiler {
  std::vector<OpEvent> events;
  double origin = 0;
  // [start, end] of each profiled step (optional): lets the analysis compare op time with the
  // measured step time and draws the steps as their own track in trace.json.
  std::vector<std::pair<double, double>> steps;
  // Set for a device that runs ops asynchronously (a GPU): every scope then waits for the device
  // at both ends, so each op is charged its device time (profiling slows such a step; off, nothing
  // changes). Null on the CPU, whose ops are done when they return.
  void (*wait)(void*) = nullptr;
  void* wait_ctx = nullptr;
  // Open ProfRegions, innermost last (see ProfRegion).
  std::vector<std::pair<const char*, const char*>> regions;  // {name, phase}
  void clear();                                   // drops events and steps, restarts the origin
  void mark_step(double start, double end) { steps.emplace_back(start, end); }
};

// Inline so that with profiling off (p == nullptr) a scope compiles to one predictable branch at
// each end: no call, no clock read.
struct ProfScope {
  ProfScope(Profiler* prof, const char* name, const char* phase, double flops, double bytes,
            const char* op = nullptr)
      : p(prof) {
    if (p) begin(name, phase, flops, bytes, op);
  }
  ~ProfScope() {
    if (p) end();
  }
  ProfScope(const ProfScope&) = delete;
  ProfScope& operator=(const ProfScope&) = delete;
  Profiler* p;
  OpEvent ev;

 private:
  void begin(const char* name, const char* phase, double flops, double bytes, const char* op);
  void end();                                                                    // records ev
};

// Names the ops issued while it is open: an op timed inside it is recorded under the region's name
// and phase (the innermost region wins). It records nothing itself, so nested regions and the ops
// inside them never count twice.
struct ProfRegion {
  ProfRegion(Profiler* prof, const char* name, const char* phase) : p(prof) {
    if (p) p->regions.emplace_back(name, phase);
  }
  ~ProfRegion() {
    if (p) p->regions.pop_back();
  }
  ProfRegion(const ProfRegion&) = delete;
  ProfRegion& operator=(const ProfRegion&) = delete;
  Profiler* p;
};

}  // namespace clm

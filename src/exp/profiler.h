// Per-op profiler: every op of forward, backward and optimizer opens a ProfScope with its FLOPs and
// bytes moved; with no profiler attached (nullptr) a scope costs one branch. Owned by issue 5.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace clm {

struct OpEvent {
  const char* name;    // op name, e.g. "matmul.qkv", "attn.fwd" (static string)
  const char* phase;   // "fwd" | "bwd" | "optim" | "other"
  double start, end;   // seconds (steady clock; CUDA events on the GPU)
  double flops;        // floating-point operations done by the op
  double bytes;        // bytes read + written (minimum traffic computed from shapes)
};

struct Profiler {
  std::vector<OpEvent> events;
  double origin = 0;
  void clear();
};

struct ProfScope {
  ProfScope(Profiler* p, const char* name, const char* phase, double flops, double bytes);
  ~ProfScope();
  ProfScope(const ProfScope&) = delete;
  ProfScope& operator=(const ProfScope&) = delete;
  Profiler* p;
  OpEvent ev;
};

}  // namespace clm

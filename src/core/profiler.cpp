// Event recording for ProfScope; analysis and output live in profile/profile_report.cpp.
#include "core/profiler.h"

#include "core/common.h"

namespace clm {

void Profiler::clear() {
  events.clear();
  steps.clear();
  origin = now_seconds();
}

void ProfScope::begin(const char* name, const char* phase, double flops, double bytes, const char* op) {
  if (p->wait) p->wait(p->wait_ctx);
  ev = OpEvent{name, phase, now_seconds(), 0.0, flops, bytes, op};
}

void ProfScope::end() {
  if (p->wait) p->wait(p->wait_ctx);
  ev.end = now_seconds();
  p->events.push_back(ev);
}

}  // namespace clm

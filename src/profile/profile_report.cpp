// Profile analysis and output (see profile_report.h).
#include "profile/profile_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/common.h"

namespace clm {

OpCost matmul_cost(int64_t M, int64_t N, int64_t K, int a_bytes, int b_bytes, int c_bytes, bool accumulate) {
  OpCost c;
  c.flops = 2.0 * double(M) * double(N) * double(K);
  c.bytes = double(M) * K * a_bytes + double(K) * N * b_bytes + double(M) * N * c_bytes * (accumulate ? 2 : 1);
  return c;
}

OpCost elementwise_cost(int64_t n, int reads, int writes, double flops_per_elem, int elem_bytes) {
  return {double(n) * flops_per_elem, double(n) * double(reads + writes) * elem_bytes};
}

OpCost attention_fwd_cost(int64_t B, int64_t H, int64_t T, int64_t D, int elem_bytes) {
  double pairs = double(T) * double(T + 1) / 2.0;
  return {double(B) * H * 4.0 * D * pairs, 4.0 * double(B) * H * T * D * elem_bytes};
}

static void finish_stats(OpStats& o, double measured, int steps, const Roofline& roof, double peak) {
  (void)steps;
  o.share = measured > 0 ? o.seconds / measured : 0;
  o.intensity = o.bytes > 0 ? o.flops / o.bytes : 0;
  o.flops_per_s = o.seconds > 0 ? o.flops / o.seconds : 0;
  o.bytes_per_s = o.seconds > 0 ? o.bytes / o.seconds : 0;
  double bw = roof.mem_bytes_per_s();
  double t_compute = peak > 0 ? o.flops / peak : 0, t_memory = bw > 0 ? o.bytes / bw : 0;
  o.bound_seconds = std::max(t_compute, t_memory);
  o.roof_fraction = o.seconds > 0 ? o.bound_seconds / o.seconds : 0;
  if (o.flops > 0 || o.bytes > 0) o.bound = t_compute >= t_memory ? "compute" : "memory";
}

ProfileSummary analyze_profile(const Profiler& prof, double measured, int steps, const Roofline& roof, bool bf16_roof) {
  ProfileSummary s;
  s.roof = roof;
  s.bf16_roof = bf16_roof;
  const auto& ev = prof.events;
  if (!prof.steps.empty()) {
    steps = int(prof.steps.size());
    if (measured <= 0)
      for (auto& [a, b] : prof.steps) measured += b - a;
  }
  if (measured <= 0 && !ev.empty()) {
    double lo = ev[0].start, hi = ev[0].end;
    for (auto& e : ev) lo = std::min(lo, e.start), hi = std::max(hi, e.end);
    measured = hi - lo;
  }
  s.steps = std::max(steps, 1);
  s.measured_seconds = measured;

  // Self time: sort by start (longer first on ties) and walk with a stack of enclosing scopes.
  std::vector<size_t> order(ev.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (ev[a].start != ev[b].start) return ev[a].start < ev[b].start;
    return ev[a].end > ev[b].end;
  });
  std::vector<double> self(ev.size());
  std::vector<size_t> stack;
  for (size_t i : order) {
    self[i] = ev[i].end - ev[i].start;
    while (!stack.empty() && ev[stack.back()].end <= ev[i].start) stack.pop_back();
    if (!stack.empty() && ev[i].end <= ev[stack.back()].end) self[stack.back()] -= self[i];
    else {
      stack.clear();  // a partial overlap cannot come from scopes on one thread; treat as top level
      s.op_seconds += ev[i].end - ev[i].start;
    }
    stack.push_back(i);
  }

  std::map<std::pair<std::string, std::string>, OpStats> by_op;
  std::map<std::string, OpStats> by_phase;
  for (size_t i = 0; i < ev.size(); ++i) {
    std::string name = ev[i].name ? ev[i].name : "?", phase = ev[i].phase ? ev[i].phase : "other";
    for (OpStats* o : {&by_op[{name, phase}], &by_phase[phase]}) {
      o->count++;
      o->seconds += std::max(self[i], 0.0);
      o->flops += ev[i].flops;
      o->bytes += ev[i].bytes;
    }
    by_op[{name, phase}].name = name;
    by_op[{name, phase}].phase = phase;
    by_phase[phase].name = phase;
    by_phase[phase].phase = phase;
    s.total_flops += ev[i].flops;
    s.total_bytes += ev[i].bytes;
  }
  double peak = s.peak_flops();
  for (auto& [k, o] : by_op) {
    finish_stats(o, measured, s.steps, roof, peak);
    s.ops.push_back(o);
  }
  std::sort(s.ops.begin(), s.ops.end(), [](const OpStats& a, const OpStats& b) {
    if (a.seconds != b.seconds) return a.seconds > b.seconds;
    return a.name < b.name;
  });
  s.gap_seconds = std::max(0.0, measured - s.op_seconds);
  if (s.gap_seconds > 0) {
    OpStats g;
    g.name = "(gap)";
    g.phase = "-";
    g.count = s.steps;
    g.seconds = s.gap_seconds;
    finish_stats(g, measured, s.steps, roof, peak);
    s.ops.push_back(g);
  }
  for (const char* p : {"fwd", "bwd", "optim", "other"})
    if (by_phase.count(p)) {
      finish_stats(by_phase[p], measured, s.steps, roof, peak);
      s.phases.push_back(by_phase[p]);
    }
  for (auto& [k, o] : by_phase)
    if (k != "fwd" && k != "bwd" && k != "optim" && k != "other") {
      finish_stats(o, measured, s.steps, roof, peak);
      s.phases.push_back(o);
    }
  return s;
}

static std::string fmt_rate(double v, double unit) { return v > 0 ? fmt::format("{:.1f}", v / unit) : "-"; }

std::string format_profile_table(const ProfileSummary& s, int top) {
  std::string out;
  double per_step = s.measured_seconds / s.steps;
  out += fmt::format("profile: {} step(s), {:.2f} ms/step measured; ops {:.1f}%, gap {:.1f}%\n", s.steps,
                     per_step * 1e3, s.measured_seconds > 0 ? 100 * s.op_seconds / s.measured_seconds : 0.0,
                     s.measured_seconds > 0 ? 100 * s.gap_seconds / s.measured_seconds : 0.0);
  out += fmt::format("roofline: {} {:.1f} GFLOP/s, {:.1f} GB/s, ridge {:.1f} FLOP/byte ({})\n",
                     s.bf16_roof ? "bf16" : "fp32", s.peak_flops() / 1e9, s.roof.mem_bytes_per_s() / 1e9,
                     s.roof.ridge(s.bf16_roof), s.roof.cpu_model);
  if (s.measured_seconds > 0)
    out += fmt::format("achieved: {:.1f} GFLOP/s over the whole step ({:.1f}% of peak)\n",
                       s.total_flops / s.measured_seconds / 1e9,
                       s.peak_flops() > 0 ? 100 * s.total_flops / s.measured_seconds / s.peak_flops() : 0.0);
  out += fmt::format("{:<28} {:<5} {:>6} {:>9} {:>6} {:>8} {:>7} {:>7} {:>6} {:<7}\n", "op", "phase", "calls",
                     "ms/step", "share", "GFLOP/s", "GB/s", "FLOP/B", "%roof", "bound");
  int shown = 0;
  double rest_s = 0;
  int rest_n = 0;
  for (const auto& o : s.ops) {
    bool gap = o.name == "(gap)";
    if (!gap && shown >= top) {
      rest_s += o.seconds;
      rest_n++;
      continue;
    }
    if (!gap) shown++;
    out += fmt::format("{:<28} {:<5} {:>6} {:>9.3f} {:>5.1f}% {:>8} {:>7} {:>7} {:>6} {:<7}\n", o.name, o.phase,
                       o.count / s.steps, o.seconds / s.steps * 1e3, 100 * o.share, fmt_rate(o.flops_per_s, 1e9),
                       fmt_rate(o.bytes_per_s, 1e9), o.bytes > 0 ? fmt::format("{:.1f}", o.intensity) : "-",
                       o.bound.empty() ? "-" : fmt::format("{:.0f}%", 100 * o.roof_fraction),
                       o.bound.empty() ? "-" : o.bound);
  }
  if (rest_n > 0)
    out += fmt::format("{:<28} {:<5} {:>6} {:>9.3f} {:>5.1f}%\n", fmt::format("({} more ops)", rest_n), "", "",
                       rest_s / s.steps * 1e3, s.measured_seconds > 0 ? 100 * rest_s / s.measured_seconds : 0.0);
  out += "phases:";
  for (const auto& p : s.phases)
    out += fmt::format(" {} {:.2f} ms ({:.1f}%)", p.name, p.seconds / s.steps * 1e3, 100 * p.share);
  out += "\n";
  return out;
}

static nlohmann::json stats_json(const OpStats& o, int steps) {
  return {{"name", o.name},
          {"phase", o.phase},
          {"calls", o.count},
          {"seconds", o.seconds},
          {"ms_per_step", o.seconds / steps * 1e3},
          {"share", o.share},
          {"flops", o.flops},
          {"bytes", o.bytes},
          {"intensity", o.intensity},
          {"flops_per_s", o.flops_per_s},
          {"bytes_per_s", o.bytes_per_s},
          {"roofline_seconds", o.bound_seconds},
          {"roof_fraction", o.roof_fraction},
          {"bound", o.bound}};
}

nlohmann::json profile_json(const ProfileSummary& s) {
  nlohmann::json ops = nlohmann::json::array(), phases = nlohmann::json::array();
  for (const auto& o : s.ops) ops.push_back(stats_json(o, s.steps));
  for (const auto& p : s.phases) phases.push_back(stats_json(p, s.steps));
  return {{"version", 1},
          {"steps", s.steps},
          {"measured_seconds", s.measured_seconds},
          {"step_seconds", s.measured_seconds / s.steps},
          {"op_seconds", s.op_seconds},
          {"gap_seconds", s.gap_seconds},
          {"total_flops", s.total_flops},
          {"total_bytes", s.total_bytes},
          {"achieved_flops_per_s", s.measured_seconds > 0 ? s.total_flops / s.measured_seconds : 0.0},
          {"compute_roof", s.bf16_roof ? "bf16" : "fp32"},
          {"roofline", to_json(s.roof)},
          {"ops", ops},
          {"phases", phases}};
}

nlohmann::json chrome_trace(const Profiler& prof) {
  // Time zero = the first thing recorded, so the trace opens at its start.
  double origin = HUGE_VAL;
  for (const auto& e : prof.events) origin = std::min(origin, e.start);
  for (const auto& st : prof.steps) origin = std::min(origin, st.first);
  if (origin == HUGE_VAL) origin = prof.origin;
  auto us = [&](double t) { return std::round((t - origin) * 1e7) / 10.0; };  // 0.1 us resolution
  auto dur_us = [](double a, double b) { return std::max(0.0, std::round((b - a) * 1e7) / 10.0); };
  nlohmann::json evs = nlohmann::json::array();
  evs.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", "clocklm"}}}});
  evs.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", "ops"}}}});
  if (!prof.steps.empty())
    evs.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 2}, {"args", {{"name", "steps"}}}});
  for (size_t i = 0; i < prof.steps.size(); ++i) {
    auto [a, b] = prof.steps[i];
    evs.push_back({{"name", fmt::format("step {}", i)}, {"cat", "step"}, {"ph", "X"}, {"ts", us(a)},
                   {"dur", dur_us(a, b)}, {"pid", 1}, {"tid", 2}});
  }
  // Sorted by start (outer scopes first) so viewers nest them without guessing.
  std::vector<const OpEvent*> sorted;
  for (const auto& e : prof.events) sorted.push_back(&e);
  std::stable_sort(sorted.begin(), sorted.end(), [](const OpEvent* a, const OpEvent* b) {
    if (a->start != b->start) return a->start < b->start;
    return a->end > b->end;
  });
  for (const OpEvent* e : sorted) {
    double dur = e->end - e->start;
    nlohmann::json args = {{"flops", e->flops}, {"bytes", e->bytes}};
    if (dur > 0 && e->flops > 0) args["GFLOP/s"] = std::round(e->flops / dur / 1e7) / 100;
    if (dur > 0 && e->bytes > 0) args["GB/s"] = std::round(e->bytes / dur / 1e7) / 100;
    evs.push_back({{"name", e->name ? e->name : "?"}, {"cat", e->phase ? e->phase : "other"}, {"ph", "X"},
                   {"ts", us(e->start)}, {"dur", dur_us(e->start, e->end)}, {"pid", 1},
                   {"tid", 1}, {"args", args}});
  }
  return {{"traceEvents", evs}, {"displayTimeUnit", "ms"}};
}

ProfileSummary write_profile(const Profiler& prof, const std::string& dir, double measured_seconds, int steps,
                             const Roofline* roof) {
  Roofline r = roof ? *roof : machine_roofline(false, 0, stderr);
  ProfileSummary s = analyze_profile(prof, measured_seconds, steps, r);
  make_dirs(dir);
  atomic_write(dir + "/profile.json", profile_json(s).dump(2) + "\n");
  atomic_write(dir + "/trace.json", chrome_trace(prof).dump() + "\n");
  atomic_write(dir + "/profile.txt", format_profile_table(s, 1000));
  return s;
}

}  // namespace clm

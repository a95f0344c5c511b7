// The planner (see plan.h): fitting the scaling law to runs, timing candidate shapes on the device,
// and ranking them by the bpb the law predicts for the bytes each one sees in the budget.
#include "plan/plan.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "backend/backend.h"
#include "core/common.h"
#include "data/dataset.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "train/schedule.h"
#include "train/train_setup.h"
#include "train/train_step.h"

namespace fs = std::filesystem;

namespace clm {

namespace {

// The inputs (vocabulary, bytes per token) that the candidates are planned for.
struct PlanData {
  int vocab = 8192;
  double bytes_per_token = 4.03;  // English text at a vocabulary of 8192 (the built-in law's data)
};


PlanData plan_data(const std::string& dir) {
  PlanData d;
  if (dir.empty()) return d;
  const DatasetInfo info = read_dataset_info(dir);
  d.vocab = int(info.vocab_size);
  d.bytes_per_token = train_bytes_per_token(info);
  if (!(d.bytes_per_token > 0)) fail("plan: {} records no train bytes and tokens in manifest.json", dir);
  return d;
}

// One optimizer step of `c` timed on the device: one micro-batch's forward and backward and one
// optimizer update, after a warm-up step that builds every primitive; the step is the micro-batch
// time times the micro-batches per step plus the update. Best of `reps`.
double time_step_tokens_per_second(const RunConfig& c, Backend& be, int reps) {
  const int B = c.train.micro_batch, T = c.model.seq_len;
  TrainSetupOptions setup_options;
  setup_options.batch = B;
  setup_options.seq_len = T;
  setup_options.seed = c.train.seed;
  TrainSetup setup = build_train_setup(c, be, setup_options);
  GPT& model = *setup.model;
  Optimizer& opt = *setup.optimizer;
  opt.warmup();
  const int64_t N = int64_t(B) * T;
  std::vector<int32_t> in(static_cast<size_t>(N)), tg(static_cast<size_t>(N));
  fill_synthetic_tokens(42, c.model.vocab_size, in, tg);
  const ScheduleValues sched{1.0f, 1.0f, c.optim.matrix.momentum};
  StepOptions so;
  so.phase_times = true;
  const double accum = double(c.train.batch_tokens) / double(N);
  double best = INFINITY;
  for (int s = 0; s <= reps; ++s) {
    const StepResult r = train_step(model, &opt, in.data(), tg.data(), 1, B, T, sched, so);
    if (s == 0) continue;
    best = std::min(best, accum * (r.forward_seconds + r.backward_seconds) + r.optimizer_seconds);
  }
  return double(c.train.batch_tokens) / best;
}

}  // namespace
nlohmann::json PlanResult::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const PlanCandidate& c : ranked)
    rows.push_back({{"config", c.cfg.name},
                    {"n_layer", c.cfg.model.n_layer},
                    {"d_model", c.cfg.model.d_model},
                    {"seq_len", c.cfg.model.seq_len},
                    {"batch_tokens", c.cfg.train.batch_tokens},
                    {"matrix_params", c.matrix_params},
                    {"params", double(count_params(c.cfg.model).total())},
                    {"tokens_per_second", c.tokens_per_second},
                    {"measured", c.measured},
                    {"tokens", c.tokens},
                    {"bytes", c.bytes},
                    {"predicted_bpb", c.predicted_bpb},
                    {"predicted_error", c.predicted_error},
                    {"preset", c.preset},
                    {"variant_of", c.variant_of},
                    {"made_for_seconds", c.made_for_seconds},
                    {"family", c.family},
                    {"note", c.note},
                    {"memory_bytes", c.memory_bytes},
                    {"fits", c.fits}});
  return {{"budget_seconds", budget_seconds}, {"device", device},    {"vocab_size", vocab_size},
          {"bytes_per_token", bytes_per_token}, {"law", law.to_json()}, {"plan_seconds", plan_seconds},
          {"warning", warning}, {"choice", choice}, {"families", model.to_json()}, {"candidates", rows}};
}

namespace {

// A warning when the CPU that times the candidates is busy: other work running now slows the
// candidates by different amounts and the plan then ranks the slowdown.
std::string busy_warning(const Backend& be) {
  if (!be.host_visible()) return "";
  double load = -1;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  const int cores = omp_get_num_procs();
  if (load < 0.5 * cores) return "";
  return fmt::format("the machine is busy (load average {:.2f} on {} cores): tokens/s are timed under that load, "
                     "so the ranking and the predictions may be off",
                     load, cores);
}

// A candidate's facts other than its speed: the config as it would train here, its family, size,
// FLOPs and memory.
PlanCandidate make_candidate(RunConfig cfg, bool preset, const PlanOptions& o, const PlanData& data, Backend& be) {
  PlanCandidate c;
  c.preset = preset;
  c.cfg = std::move(cfg);
  apply_overrides(c.cfg, o.sets);
  c.cfg.model.vocab_size = data.vocab;
  c.cfg.train.budget_seconds = o.budget_seconds;
  validate(c.cfg);
  c.family = recipe_family(c.cfg);
  const int B = c.cfg.train.micro_batch, T = c.cfg.model.seq_len;
  c.matrix_params = double(count_params(c.cfg.model).matrix);
  c.flops_per_token = flops_per_token(c.cfg.model, T);
  c.memory_bytes =
      double(training_memory_bytes(c.cfg.model, B, T, be, c.cfg.train.batch_tokens > int64_t(B) * T));
  c.fits = c.memory_bytes <= double(be.memory_capacity());
  return c;
}

// Whether `p` is `q` but for the end of its schedule (warmup, warmdown, its shape, final lr) and its budget:
// the law tells their variants apart by nothing, so only `q`'s are made.
static bool same_but_schedule_end(const RunConfig& p, const RunConfig& q) {
  RunConfig a = p;
  a.train.warmup_frac = q.train.warmup_frac;
  a.train.warmdown_frac = q.train.warmdown_frac;
  a.train.final_lr_frac = q.train.final_lr_frac;
  a.train.warmdown_shape = q.train.warmdown_shape;
  return config_hash(a) == config_hash(q);
}

// The depths of the d<N> rule, then every built-in preset made for this vocabulary (the d<N>
// presets are the rule's own depths), then the recipe of each preset whose family has runs at the
// rule's depths within `variant_reach` layers of its own.
std::vector<PlanCandidate> plan_candidates(const PlanOptions& o, const PlanData& data, const RecipeModel& model,
                                           Backend& be) {
  std::vector<PlanCandidate> cands;
  for (int d = o.min_depth; d <= o.max_depth; ++d) cands.push_back(make_candidate(depth_config(d), false, o, data, be));
  if (!o.presets) return cands;
  std::vector<RunConfig> recipes;
  for (const std::string& name : preset_names()) {
    if (name[0] == 'd') continue;
    const RunConfig p = load_config(name);
    if (p.model.vocab_size != 0 && p.model.vocab_size != data.vocab) continue;  // made for another tokenizer
    try {
      cands.push_back(make_candidate(p, true, o, data, be));
      cands.back().made_for_seconds = preset_made_for_seconds(name);
      const bool repeats = std::any_of(recipes.begin(), recipes.end(),
                                       [&](const RunConfig& q) { return same_but_schedule_end(p, q); });
      if (model.has_runs(cands.back().family) && !repeats) recipes.push_back(p);
    } catch (const Error& e) {  // the overrides do not suit this preset (e.g. its batch schedule)
      if (o.progress) std::fprintf(stderr, "plan: leaving out preset %s: %s\n", name.c_str(), e.what());
    }
  }
  for (const RunConfig& p : recipes)
    for (int d = std::max(o.min_depth, p.model.n_layer - o.variant_reach);
         d <= std::min(o.max_depth, p.model.n_layer + o.variant_reach); ++d) {
      const RunConfig v = recipe_at_depth(p, d);
      if (v.model.d_model == p.model.d_model && v.model.n_layer == p.model.n_layer) continue;  // the preset itself
      try {
        cands.push_back(make_candidate(v, false, o, data, be));
        cands.back().variant_of = p.name;
      } catch (const Error& e) {
        if (o.progress) std::fprintf(stderr, "plan: leaving out %s: %s\n", v.name.c_str(), e.what());
      }
    }
  return cands;
}

const PlanCandidate* find_candidate(const std::vector<PlanCandidate>& cands, const std::string& name) {
  for (const PlanCandidate& c : cands)
    if (c.cfg.name == name) return &c;
  return nullptr;
}

// The fitting preset made for the budget (its own budget within a factor of 1.25 of it, the
// nearest), or null.
const PlanCandidate* preset_for_budget(const std::vector<PlanCandidate>& cands) {
  const PlanCandidate* best = nullptr;
  double best_gap = std::log(1.25);
  for (const PlanCandidate& c : cands) {
    if (!c.preset || !c.fits || !(c.made_for_seconds > 0)) continue;
    const double gap = std::fabs(std::log(c.made_for_seconds / c.cfg.train.budget_seconds));
    if (gap <= best_gap) best = &c, best_gap = gap;
  }
  return best;
}

// The candidate that `c` must beat by more than its own error and does not: its preset (for a
// variant), then the preset made for the budget; null when `c` may be chosen on its prediction.
// Without a measure of its error, `c` never beats either.
const PlanCandidate* holds_back(const PlanCandidate& c, const std::vector<PlanCandidate>& cands) {
  const PlanCandidate* refs[2] = {c.variant_of.empty() ? nullptr : find_candidate(cands, c.variant_of),
                                  preset_for_budget(cands)};
  for (const PlanCandidate* r : refs) {
    if (!r || !r->fits || r->cfg.name == c.cfg.name) continue;
    if (!(c.predicted_error >= 0 && r->predicted_bpb - c.predicted_bpb > c.predicted_error)) return r;
  }
  return nullptr;
}

const char* kind_name(const PlanCandidate& c) {
  return c.preset ? "preset" : c.variant_of.empty() ? "rule depth" : "variant";
}

// Which row won and against what: the best candidate of another kind (preset, rule depth, variant),
// and the candidates predicted better that were held back by a preset.
std::string choice_text(const std::vector<PlanCandidate>& ranked, const std::vector<PlanCandidate>& passed) {
  const PlanCandidate& best = ranked.front();
  const PlanCandidate* other = nullptr;
  for (const PlanCandidate& c : ranked)
    if (c.fits && std::string(kind_name(c)) != kind_name(best)) {
      other = &c;
      break;
    }
  std::string s = fmt::format("{} {} (family {})", kind_name(best), best.cfg.name, best.family);
  if (best.preset && &best == preset_for_budget(ranked))
    s += fmt::format(", made for this budget ({:.0f} s)", best.made_for_seconds);
  s += fmt::format(": predicted {:.4f} bpb", best.predicted_bpb);
  if (other)
    s += fmt::format(", against the best {} {} at {:.4f}", kind_name(*other), other->cfg.name, other->predicted_bpb);
  for (const PlanCandidate& v : passed) {
    const PlanCandidate* r = holds_back(v, ranked);
    if (!r) continue;
    s += fmt::format("; passed over {} at {:.4f}: not better than {} by more than its error ({})", v.cfg.name,
                     v.predicted_bpb, r->cfg.name,
                     v.predicted_error < 0 ? std::string("unknown") : fmt::format("{:.4f}", v.predicted_error));
  }
  if (!best.note.empty()) s += "; caution: " + best.note;
  return s;
}

// The candidates as they are timed, predicted and ranked.
struct Ranking {
  const PlanOptions& o;
  const PlanData& data;
  const RecipeModel& model;
  Backend& be;
  std::vector<PlanCandidate> cands;

  void predict(PlanCandidate& c) const {
    c.tokens = c.tokens_per_second * o.budget_seconds;
    c.bytes = c.tokens * data.bytes_per_token;
    const RecipePrediction p = model.predict(c.family, c.matrix_params, c.bytes);
    c.predicted_bpb = p.bpb;
    c.predicted_error = p.error;
    c.note = p.note;
  }
  // Times `c` on the device; a candidate timed before keeps the faster of its rates.
  void time(PlanCandidate& c) const {
    if (o.progress)
      std::fprintf(stderr, "plan: timing %s (%d x %d) on %s\n", c.cfg.name.c_str(), c.cfg.model.n_layer,
                   c.cfg.model.d_model, be.name().c_str());
    const double tps = time_step_tokens_per_second(c.cfg, be, 2);
    c.tokens_per_second = c.measured ? std::max(c.tokens_per_second, tps) : tps;
    c.measured = true;
    predict(c);
  }
  // One rule depth near the middle is timed; the others' tokens/s are scaled from it by their FLOPs
  // per token (the same fraction of the device's rate).
  void estimate_from_one() {
    std::vector<size_t> fitting;
    for (size_t i = 0; i < cands.size(); ++i)
      if (cands[i].fits && !cands[i].preset && cands[i].variant_of.empty()) fitting.push_back(i);
    if (fitting.empty()) fail("plan: no candidate d{}..d{} fits the device's memory", o.min_depth, o.max_depth);
    PlanCandidate& ref = cands[fitting[fitting.size() / 2]];
    time(ref);
    for (PlanCandidate& c : cands)
      if (!c.measured) {
        c.tokens_per_second = ref.tokens_per_second * ref.flops_per_token / c.flops_per_token;
        predict(c);
      }
  }
  static bool better(const PlanCandidate& a, const PlanCandidate& b) {
    if (a.fits != b.fits) return a.fits;
    return a.predicted_bpb < b.predicted_bpb;
  }
  // The best few by estimate are timed themselves (`measure_top` timed in all, the reference included).
  void time_best_estimates() {
    std::vector<size_t> order(cands.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return better(cands[a], cands[b]); });
    int n_timed = 1;
    for (size_t i : order) {
      if (n_timed >= o.measure_top) break;
      if (!cands[i].fits || cands[i].measured) continue;
      time(cands[i]);
      ++n_timed;
    }
  }
  // Sorts the candidates and returns the chosen one's index. The chosen row is always a timed one,
  // and so are the presets it is weighed against (its own, the one made for the budget): while any
  // of them is an estimate, time it and choose again.
  size_t choose_timed() {
    for (;;) {
      std::stable_sort(cands.begin(), cands.end(), better);
      const size_t pick = choose_candidate(cands);
      PlanCandidate& c = cands[pick];
      if (!c.fits) return pick;
      const PlanCandidate* untimed = c.measured ? nullptr : &c;
      for (const PlanCandidate* r : {find_candidate(cands, c.variant_of), preset_for_budget(cands)})
        if (!untimed && r && r->fits && !r->measured) untimed = r;
      if (!untimed) return pick;
      time(cands[size_t(untimed - cands.data())]);
    }
  }
};

}  // namespace

size_t choose_candidate(const std::vector<PlanCandidate>& cands) {
  for (size_t i = 0; i < cands.size(); ++i)
    if (cands[i].fits && !holds_back(cands[i], cands)) return i;
  return 0;
}

PlanResult make_plan(const PlanOptions& o) {
  const double t0 = now_seconds();
  if (!(o.budget_seconds > 0)) fail("plan: the budget must be positive");
  if (o.min_depth < 1 || o.max_depth > 64 || o.max_depth < o.min_depth)
    fail("plan: depths {}..{} are not a range within 1..64", o.min_depth, o.max_depth);
  if (o.measure_top < 1) fail("plan: at least one candidate must be timed (--measure 1 or more)");
  PlanResult res;
  res.budget_seconds = o.budget_seconds;
  const std::string base_family = recipe_family(depth_config(4));
  res.model = o.runs.empty() ? default_recipe_model()
                             : fit_recipe_model_to_runs(law_points_from_runs(o.runs), base_family);
  res.law = res.model.law;
  const PlanData data = plan_data(o.data_dir);
  res.vocab_size = data.vocab;
  res.bytes_per_token = data.bytes_per_token;
  std::shared_ptr<Backend> be = make_backend(o.device);
  be->set_threads(o.threads > 0 ? o.threads : default_threads());
  res.device = be->description();
  res.warning = busy_warning(*be);
  if (o.progress && !res.warning.empty()) std::fprintf(stderr, "plan: warning: %s\n", res.warning.c_str());

  Ranking rk{o, data, res.model, *be, plan_candidates(o, data, res.model, *be)};
  rk.estimate_from_one();
  rk.time_best_estimates();
  size_t pick = rk.choose_timed();
  // Other work on the device slows whichever candidate is being timed at that moment: each timed
  // candidate is timed again, in turn, keeping its faster rate, and the choice is made again.
  for (int round = 0; round < o.retime_rounds; ++round) {
    for (PlanCandidate& c : rk.cands)
      if (c.measured) rk.time(c);
    pick = rk.choose_timed();
  }
  std::vector<PlanCandidate>& cands = rk.cands;
  const std::vector<PlanCandidate> passed(cands.begin(), cands.begin() + std::ptrdiff_t(pick));
  std::rotate(cands.begin(), cands.begin() + std::ptrdiff_t(pick), cands.begin() + std::ptrdiff_t(pick) + 1);
  res.ranked = std::move(cands);
  res.choice = choice_text(res.ranked, passed);
  res.plan_seconds = now_seconds() - t0;
  return res;
}

std::string format_plan(const PlanResult& r) {
  std::string s = fmt::format(
      "plan for a {:.0f} s budget on {} (vocab {}, {:.2f} bytes/token); law: {} (rms {:.4f} bpb, "
      "leave-one-out error {:.1f}%), corrected for {} recipe families\n",
      r.budget_seconds, r.device, r.vocab_size, r.bytes_per_token, r.law.source, r.law.rms,
      100 * r.law.loo_rel_error, r.model.families.size());
  if (!r.warning.empty()) s += "warning: " + r.warning + "\n";
  s += fmt::format("{:>4} {:<16} {:<26} {:>8} {:>8} {:>9} {:>8} {:>7} {:>7} {:<9} {}\n", "rank", "config",
                   "family", "matrix M", "tok/s", "tokens M", "pred bpb", "+-loo", "mem GiB", "", "note");
  int k = 0;
  for (const PlanCandidate& c : r.ranked) {
    const std::string err = c.predicted_error < 0 ? "?" : fmt::format("{:.4f}", c.predicted_error);
    s += fmt::format("{:>4} {:<16} {:<26} {:>8.2f} {:>8.0f} {:>9.2f} {:>8.4f} {:>7} {:>7.2f} {:<9} {}\n", ++k,
                     c.cfg.name, c.family, c.matrix_params / 1e6, c.tokens_per_second, c.tokens / 1e6,
                     c.predicted_bpb, err, c.memory_bytes / double(1 << 30),
                     !c.fits ? "too big" : c.measured ? "timed" : "estimated", c.note);
  }
  if (!r.choice.empty()) s += "chosen: " + r.choice + "\n";
  return s;
}

}  // namespace clm

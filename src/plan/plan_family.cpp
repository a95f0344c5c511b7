// Recipe families (see plan_family.h): naming a configuration's family, fitting each family's
// correction to the law with its leave-one-out error, and the recorded runs behind the built-in one.
#include "plan/plan_family.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/common.h"

namespace clm {

std::string recipe_family(const RunConfig& c) {
  const ModelConfig& m = c.model;
  std::string f = fmt::format("seq{}", m.seq_len);
  if (!c.train.seq_schedule.empty()) f += "+seqsched";
  if (m.value_embeds > 0) f += "+ve";
  if (c.optim.matrix.ns_coeffs != "quintic") f += "+" + c.optim.matrix.ns_coeffs;
  if (!c.train.batch_schedule.empty()) f += "+bsched";
  if (m.mtp_weight > 0) f += "+mtp";
  if (m.bigram_buckets > 0) f += "+bigram";
  if (m.x0_skips) f += "+x0";
  if (m.smear) f += "+smear";
  if (m.attn_window > 0) f += "+window";
  if (m.activation != "relu2") f += "+" + m.activation;
  if (m.tie_embeddings) f += "+tied";
  if (m.n_kv_head != m.n_head) f += "+gqa";
  // The matrix optimizer last: a family with runs at one amount of data takes its slope from the
  // family its name extends, and an optimizer's variant should take the slope of its recipe.
  if (c.optim.matrix.kind != "muon") f += "+" + c.optim.matrix.kind;
  return f;
}

nlohmann::json FamilyFit::to_json() const {
  return {{"family", family},       {"points", points},       {"a", a},
          {"b", b},                 {"slope_from", slope_from}, {"loo_abs_error", loo_abs_error},
          {"min_bytes", min_bytes}, {"max_bytes", max_bytes}, {"min_params", min_params},
          {"max_params", max_params}};
}

namespace {

struct Residual {
  double x, r;  // ln(D / 1e6) and measured - law
};

// Least squares a + b x over the residuals when they cover at least two amounts of data; else, or
// with a slope given (`given_b`, from a related family), the mean of r - b x.
void fit_line(const std::vector<Residual>& rs, const double* given_b, double& a, double& b) {
  double sx = 0, sr = 0;
  for (const Residual& p : rs) sx += p.x, sr += p.r;
  const double n = double(rs.size()), mx = sx / n, mr = sr / n;
  double sxx = 0, sxr = 0;
  for (const Residual& p : rs) sxx += (p.x - mx) * (p.x - mx), sxr += (p.x - mx) * (p.r - mr);
  b = given_b ? *given_b : sxx > 1e-6 ? sxr / sxx : 0.0;
  a = mr - b * mx;
}

// Whether the runs span at least a factor of 2 in data: a slope fitted over a narrower span (two
// runs at 75 and 112 MB, say) is mostly their noise, and extrapolated tenfold it decides nothing
// but wrongly.
bool covers_two_amounts(const std::vector<LawPoint>& pts) {
  double lo = pts.front().train_bytes, hi = lo;
  for (const LawPoint& p : pts) lo = std::min(lo, p.train_bytes), hi = std::max(hi, p.train_bytes);
  return hi >= 2 * lo;
}

void cover(FamilyFit& f, const LawPoint& p) {
  if (f.points++ == 0) {
    f.min_bytes = f.max_bytes = p.train_bytes;
    f.min_params = f.max_params = p.matrix_params;
    return;
  }
  f.min_bytes = std::min(f.min_bytes, p.train_bytes), f.max_bytes = std::max(f.max_bytes, p.train_bytes);
  f.min_params = std::min(f.min_params, p.matrix_params);
  f.max_params = std::max(f.max_params, p.matrix_params);
}

FamilyFit fit_family(const std::string& name, const ScalingLaw& law, const std::vector<LawPoint>& pts,
                     const FamilyFit* slope_from) {
  FamilyFit f;
  f.family = name;
  const double* given_b = slope_from ? &slope_from->b : nullptr;
  if (slope_from) f.slope_from = slope_from->family;
  std::vector<Residual> rs;
  for (const LawPoint& p : pts) {
    cover(f, p);
    rs.push_back({std::log(p.train_bytes / 1e6), p.bpb - law.predict(p.matrix_params, p.train_bytes)});
  }
  fit_line(rs, given_b, f.a, f.b);
  if (rs.size() >= 2) {
    double err = 0;
    for (size_t i = 0; i < rs.size(); ++i) {
      std::vector<Residual> rest(rs);
      rest.erase(rest.begin() + std::ptrdiff_t(i));
      double a, b;
      fit_line(rest, given_b, a, b);
      err += std::fabs(a + b * rs[i].x - rs[i].r);
    }
    f.loo_abs_error = err / double(rs.size());
  }
  return f;
}

// Beyond a run's data by more than this factor a prediction says so.
constexpr double kReach = 1.5;

std::string range_note(const FamilyFit& f, double n, double d) {
  std::string s;
  if (d > f.max_bytes * kReach || d < f.min_bytes / kReach)
    s = fmt::format("{:.3g} MB of data is outside its runs' {:.3g}-{:.3g} MB", d / 1e6, f.min_bytes / 1e6,
                    f.max_bytes / 1e6);
  if (n > f.max_params * kReach || n < f.min_params / kReach)
    s += fmt::format("{}{:.3g}M matrix params is outside its runs' {:.3g}-{:.3g}M", s.empty() ? "" : "; ", n / 1e6,
                     f.min_params / 1e6, f.max_params / 1e6);
  return s;
}

}  // namespace

RecipeModel fit_recipe_model(const ScalingLaw& law, const std::string& base_family,
                             const std::vector<LawPoint>& points) {
  RecipeModel m;
  m.law = law;
  m.base.family = base_family;
  std::map<std::string, std::vector<LawPoint>> by_family;
  for (const LawPoint& p : points) {
    const std::string& f = p.family.empty() ? base_family : p.family;
    if (f == base_family) cover(m.base, p);
    else by_family[f].push_back(p);
  }
  // Families whose runs cover several amounts of data fit their own slope; the others take the
  // slope of the nearest family whose name begins theirs and has one (the base's is 0: the law
  // already follows the data), since a slope from one amount of data (or a narrow span) cannot be
  // measured.
  for (const auto& [name, pts] : by_family)
    if (covers_two_amounts(pts)) m.families.push_back(fit_family(name, law, pts, nullptr));
  const size_t with_slope = m.families.size();
  m.families.reserve(by_family.size());  // `from` below points into it while it grows
  for (const auto& [name, pts] : by_family) {
    if (covers_two_amounts(pts)) continue;
    const FamilyFit* from = &m.base;
    size_t longest = 0;
    for (size_t i = 0; i < with_slope; ++i) {
      const std::string& g = m.families[i].family;
      if (name.starts_with(g + "+") && g.size() > longest) from = &m.families[i], longest = g.size();
    }
    FamilyFit f = fit_family(name, law, pts, from);
    m.families.push_back(std::move(f));
  }
  std::sort(m.families.begin(), m.families.end(),
            [](const FamilyFit& x, const FamilyFit& y) { return x.family < y.family; });
  return m;
}

RecipePrediction RecipeModel::predict(const std::string& family, double n, double d) const {
  RecipePrediction r;
  r.bpb = law.predict(n, d);
  const double law_error = law.loo_rel_error * r.bpb;
  if (family == base.family) {
    r.error = law_error;
    if (base.points > 0) r.note = range_note(base, n, d);
    return r;
  }
  for (const FamilyFit& f : families)
    if (f.family == family) {
      r.bpb += f.a + f.b * std::log(std::max(d, 1.0) / 1e6);
      // The law's error and the correction's add up (the correction is fitted to the law's residuals).
      r.error = f.loo_abs_error < 0 ? -1 : law_error + f.loo_abs_error;
      r.note = range_note(f, n, d);
      if (r.note.empty() && f.points < 2) r.note = "one run of this family";
      return r;
    }
  r.error = -1;
  r.note = fmt::format("no runs of this family: the {} curve, uncorrected", base.family);
  return r;
}

bool RecipeModel::has_runs(const std::string& family) const {
  for (const FamilyFit& f : families)
    if (f.family == family && f.points > 0) return true;
  return false;
}

nlohmann::json RecipeModel::to_json() const {
  nlohmann::json fams = nlohmann::json::array();
  for (const FamilyFit& f : families) fams.push_back(f.to_json());
  return {{"law", law.to_json()},
          {"base_family", base.to_json()},
          {"correction", "bpb = law(N, D) + a + b*ln(D/1e6) for a family other than the base"},
          {"families", fams}};
}

RecipeModel fit_recipe_model_to_runs(const std::vector<LawPoint>& points, const std::string& base_family) {
  std::vector<LawPoint> base;
  for (const LawPoint& p : points)
    if (p.family.empty() || p.family == base_family) base.push_back(p);
  return fit_recipe_model(fit_scaling_law(base), base_family, points);
}

std::vector<LawPoint> builtin_recipe_points() {
  struct Row {
    const char* run;
    const char* family;
    double matrix_params, train_bytes, bpb;
  };
  // Bytes per token of the recipe screens' training split; their runs record tokens.
  constexpr double kBpt = 4.028;
  constexpr double d3 = 1327104, w192x4 = 1769472, d4 = 3145728;
  static const Row rows[] = {
      // The built-in law's points (bench/results/plan_points.jsonl): the d<N> rule, 1024-token rows.
      {"law/d2-s280", "seq1024", 393216, 4619636, 2.1223},
      {"law/d3-s280", "seq1024", 1327104, 4619636, 2.0912},
      {"law/d6-s280", "seq1024", 10616832, 4619636, 2.0486},
      {"law/d2-s1120", "seq1024", 393216, 18478542, 1.8841},
      {"law/d3-s1120", "seq1024", 1327104, 18478542, 1.8365},
      {"recipe/b120/base-s1337", "seq1024", d4, 4636134, 2.0648},
      {"recipe/b120/base-s1", "seq1024", d4, 4636134, 2.0685},
      {"recipe/b120/L2-s1337", "seq1024", 1572864, 6896456, 2.0233},
      {"recipe/b120/L3W192-s1337", "seq1024", d3, 7374918, 2.004},
      {"recipe/b600/base-s1337", "seq1024", d4, 23213669, 1.774},
      {"recipe/b1800/base-s1337", "seq1024", d4, 69624508, 1.5665},
      {"r30/d2-s1337", "seq1024", 393216, 90214883, 1.754641233748208},
      {"r30/d4-s1337", "seq1024", d4, 35917667, 1.656180705921632},
      {"r30/d3-s1337", "seq1024", d3, 66258773.11186534, 1.6313552027643712},
      // 256-token rows, plain (bench/results/recipe.json: seq256, S256L3W192, S256L4W192).
      {"recipe/b120/seq256", "seq256", d4, 1527808 * kBpt, 1.9541776060884823},
      {"recipe/b120/S256L3W192", "seq256", d3, 2240512 * kBpt, 1.9168827242497348},
      {"recipe/b120/S256L4W192", "seq256", w192x4, 1986560 * kBpt, 1.9221662153356074},
      {"recipe/b600/S256L3W192", "seq256", d3, 11194368 * kBpt, 1.6765818689282188},
      {"recipe/b1800/S256L4W192", "seq256", w192x4, 29790208 * kBpt, 1.5906392191186312},
      // Bigram embedding (recipe.json: SR-big32k, base-big32k).
      {"recipe/b120/SR-big32k", "seq256+bigram", d3, 2138112 * kBpt, 1.8866153404251569},
      {"recipe/b600/SR-big32k", "seq256+bigram", d3, 10682368 * kBpt, 1.6941143596070032},
      {"recipe/b120/base-big32k", "seq1024+bigram", d4, 1044480 * kBpt, 2.0446069124470143},
      // Equal-steps screen on the 3 x 192, 256-token shape (recipe_steps.json), two seeds each.
      {"steps/SR-polar-s1", "seq256+polar", d3, 2240512 * kBpt, 1.9127786380649994},
      {"steps/SR-polar-s1337", "seq256+polar", d3, 2240512 * kBpt, 1.9108524141455412},
      {"steps/SR-ve3-s1", "seq256+ve", d3, 2240512 * kBpt, 1.8776650709935558},
      {"steps/SR-ve3-s1337", "seq256+ve", d3, 2240512 * kBpt, 1.8777121729977395},
      {"steps/SR-polar-ve3-s1", "seq256+ve+polar", d3, 2240512 * kBpt, 1.8717695472765443},
      {"steps/SR-polar-ve3-s1337", "seq256+ve+polar", d3, 2240512 * kBpt, 1.8746727222392239},
      {"steps/SR-pv-x0-s1", "seq256+ve+polar+x0", d3, 2240512 * kBpt, 1.8700834229935996},
      {"steps/SR-pv-x0-s1337", "seq256+ve+polar+x0", d3, 2240512 * kBpt, 1.8709370552407079},
      {"steps/SR-pv-normuon-s1", "seq256+ve+polar+normuon", d3, 2240512 * kBpt, 1.873919007840005},
      {"steps/SR-pv-normuon-s1337", "seq256+ve+polar+normuon", d3, 2240512 * kBpt, 1.8695209725945934},
      // The 10-minute shape with value embeddings and Polar Express (recipe_mtp.json base,
      // recipe_seq_schedule.json SR256), its row-length schedule (SRlong) and batch schedule (SRbs).
      {"mtp/base-s1337", "seq256+ve+polar", d3, 4681728 * kBpt, 1.7421913419010489},
      {"mtp/base-s1", "seq256+ve+polar", d3, 4681728 * kBpt, 1.7527233003426472},
      {"r10/SR-s1337", "seq256+ve+polar", d3, 10956800 * kBpt, 1.6505712437607123},
      {"r10/SR-s1", "seq256+ve+polar", d3, 10956800 * kBpt, 1.6404975779209663},
      {"r10/SRlong-s1337", "seq1024+seqsched+ve+polar", d3, 10534912 * kBpt, 1.619567507807826},
      {"r10/SRlong-s1-bf16", "seq1024+seqsched+ve+polar", d3, 10534912 * kBpt, 1.64947256671714},
      {"r10/SRbs-s1337", "seq256+ve+polar+bsched", d3, 10952704 * kBpt, 1.6329},
      {"r10/SRbs-s1", "seq256+ve+polar+bsched", d3, 10952704 * kBpt, 1.6331},
      {"mtp/mtpT-s1337", "seq256+ve+polar+mtp", d3, 3182592 * kBpt, 1.8185836800676838},
      {"mtp/mtpT-s1", "seq256+ve+polar+mtp", d3, 3182592 * kBpt, 1.7939571057224728},
      {"mtp/mtpS-s1337", "seq256+ve+polar+mtp", d3, 4681728 * kBpt, 1.7501078777677594},
      {"mtp/mtpS-s1", "seq256+ve+polar+mtp", d3, 4681728 * kBpt, 1.7336757506574842},
      // 30 minutes of the 3 x 192, 1024-token shape with both levers (recipe_zen5_30m.json).
      {"r30/d3vp-s1337", "seq1024+ve+polar", d3, 27709440 * kBpt, 1.549228994948003},
      // The auto benchmark's runs on the KVM EPYC (bench/results/auto.json): the presets and d4 at
      // 5, 10 and 30 minutes, and speedrun-10m's recipe at d2 (its 0.39M matrix parameters).
      {"auto/b300/d4", "seq1024", d4, 1867776 * kBpt, 1.9751963902343426},
      {"auto/b600/d4", "seq1024", d4, 3739648 * kBpt, 1.840092532219971},
      {"auto/b300/speedrun-10m", "seq256+ve+polar+bsched", d3, 3616768 * kBpt, 1.796331438039208},
      {"auto/b600/speedrun-10m", "seq256+ve+polar+bsched", d3, 7229440 * kBpt, 1.6794932058936967},
      {"auto/b1800/speedrun-10m", "seq256+ve+polar+bsched", d3, 21688320 * kBpt, 1.5913299401440706},
      {"auto/b300/speedrun-10m@d2", "seq256+ve+polar+bsched", 393216, 5599232 * kBpt, 1.8068851685765657},
      {"auto/b1800/speedrun-30m", "seq1024+ve+polar", d3, 18694144 * kBpt, 1.5589076174520675},
  };
  std::vector<LawPoint> out;
  for (const Row& r : rows) out.push_back({r.run, r.matrix_params, r.train_bytes, r.bpb, r.family});
  return out;
}

RecipeModel default_recipe_model() {
  return fit_recipe_model(default_scaling_law(), "seq1024", builtin_recipe_points());
}

}  // namespace clm

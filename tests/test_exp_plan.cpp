// Tests for the planner: the scaling-law fit recovers a known law and refuses too little data,
// finished runs and points files are read as law points (unfinished runs passed over), and a whole plan on the CPU
// ranks the candidates, times the winner, and writes a config that trains.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "config/config.h"
#include "core/common.h"
#include "model/config.h"
#include "plan/plan.h"
#include "plan/plan_family.h"
#include "test_cli_util.h"
#include "test_run_util.h"

using namespace clm;
using cli_test::run_clocklm;
using run_test::tiny_dataset;
namespace fs = std::filesystem;

namespace {

ScalingLaw known_law() {
  ScalingLaw l;
  // On the fit's coarse grid: alpha 0.02 + 0.04 i, beta 0.05 j, log10 K 0.25 k.
  l.E = 0.7, l.B = 3.0, l.K = std::pow(10.0, 0.5), l.alpha = 0.34, l.beta = 0.3;
  return l;
}

std::vector<LawPoint> points_of(const ScalingLaw& l) {
  std::vector<LawPoint> pts;
  for (double n : {0.5e6, 1e6, 2e6, 5e6, 12e6})
    for (double d : {2e6, 8e6, 30e6, 100e6}) pts.push_back({"p", n, d, l.predict(n, d), ""});
  return pts;
}

std::string temp_dir(const char* tag) {
  const fs::path p = fs::temp_directory_path() / fmt::format("clocklm_plan_{}_{}", tag, getpid());
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// A finished run folder as the trainer writes it (the keys the law reads).
void write_run(const fs::path& dir, int depth, double tokens, double bpb, bool finished = true) {
  fs::create_directories(dir);
  RunConfig c = load_config(fmt::format("d{}", depth), {"vocab_size=512"});
  atomic_write((dir / "config.json").string(), to_json(c).dump());
  if (finished) {
    nlohmann::json s = {{"val_bpb", bpb}, {"tokens", tokens}, {"val", {{"bytes_per_token", 4.0}}}};
    atomic_write((dir / "summary.json").string(), s.dump());
  }
}

}  // namespace

TEST(ExpPlan, FitRecoversAKnownLaw) {
  const ScalingLaw truth = known_law();
  const ScalingLaw f = fit_scaling_law(points_of(truth));
  EXPECT_NEAR(f.alpha, truth.alpha, 1e-9);
  EXPECT_NEAR(f.beta, truth.beta, 1e-9);
  EXPECT_NEAR(f.E, truth.E, 1e-6);
  EXPECT_NEAR(f.B, truth.B, 1e-6);
  EXPECT_NEAR(f.K, truth.K, 1e-6);
  EXPECT_LT(f.rms, 1e-6);
  EXPECT_LT(f.loo_rel_error, 1e-6);
  EXPECT_EQ(f.points, 20);
  // Predictions between the fitted points.
  EXPECT_NEAR(f.predict(3e6, 50e6), truth.predict(3e6, 50e6), 1e-6);
  // Off the coarse grid, the refined grid still reproduces the law well within its points' range.
  ScalingLaw off = truth;
  off.alpha = 0.357, off.beta = 0.317, off.K = 2.4;
  const ScalingLaw g = fit_scaling_law(points_of(off));
  EXPECT_LT(g.rms, 2e-3);
  EXPECT_NEAR(g.predict(3e6, 50e6), off.predict(3e6, 50e6), 5e-3);
}

TEST(ExpPlan, LawLetsASmallModelSaturateSooner) {
  // More data helps the small model less than the large one: the size x data interaction that an
  // additive law lacks.
  const ScalingLaw l = known_law();
  const double gain_small = l.predict(0.5e6, 10e6) - l.predict(0.5e6, 100e6);
  const double gain_large = l.predict(12e6, 10e6) - l.predict(12e6, 100e6);
  EXPECT_LT(gain_small, gain_large);
  // The limits: unlimited data leaves E + B K^beta N^-alpha; an unlimited model E + B D^-beta.
  EXPECT_NEAR(l.predict(2e6, 1e30), l.E + l.B * std::pow(l.K, l.beta) * std::pow(2.0, -l.alpha), 1e-9);
  EXPECT_NEAR(l.predict(1e30, 5e6), l.E + l.B * std::pow(5.0, -l.beta), 1e-9);
}

TEST(ExpPlan, FitKeepsCoefficientsNonNegativeOnNoisyData) {
  std::vector<LawPoint> pts = points_of(known_law());
  for (size_t i = 0; i < pts.size(); ++i) pts[i].bpb += (i % 2 ? 0.01 : -0.01);
  const ScalingLaw f = fit_scaling_law(pts);
  EXPECT_GE(f.E, 0);
  EXPECT_GE(f.B, 0);
  EXPECT_GT(f.K, 0);
  EXPECT_NEAR(f.rms, 0.01, 0.005);
  EXPECT_GT(f.loo_rel_error, 0);
}

TEST(ExpPlan, FitRefusesTooLittleData) {
  std::vector<LawPoint> pts = points_of(known_law());
  EXPECT_THROW(fit_scaling_law({pts.begin(), pts.begin() + 3}), Error);
  std::vector<LawPoint> one_size;
  for (const LawPoint& p : pts)
    if (p.matrix_params == 1e6) one_size.push_back(p);
  try {
    fit_scaling_law(one_size);
    ADD_FAILURE() << "a single model size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 model sizes"), std::string::npos) << e.what();
  }
}

TEST(ExpPlan, RunsAreReadAsLawPoints) {
  const std::string root = temp_dir("runs");
  write_run(fs::path(root) / "a", 4, 1e5, 2.5);
  write_run(fs::path(root) / "sweep" / "b", 5, 2e5, 2.2);
  write_run(fs::path(root) / "c", 6, 0, 0, false);  // unfinished: no summary.json
  const std::vector<LawPoint> pts = law_points_from_runs({root});
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[0].matrix_params, double(count_params(load_config("d4", {"vocab_size=512"}).model).matrix));
  EXPECT_EQ(pts[0].train_bytes, 4e5);
  EXPECT_EQ(pts[0].bpb, 2.5);
  EXPECT_EQ(pts[1].train_bytes, 8e5);
  EXPECT_THROW(law_points_from_runs({root + "/missing"}), Error);
  // A run whose dataset is here counts its tokens at the training split's bytes per token (5.0
  // here, against 4.0 on the val positions its summary records).
  const std::string data = root + "/data";
  fs::copy(tiny_dataset(), data, fs::copy_options::recursive);
  nlohmann::json m = nlohmann::json::parse(read_file(data + "/manifest.json"));
  m["splits"]["train"]["tokens"] = 1000;
  m["splits"]["train"]["bytes"] = 5000;
  atomic_write(data + "/manifest.json", m.dump(2));
  write_run(fs::path(root) / "with_data", 4, 1e5, 2.4);
  atomic_write(root + "/with_data/run.json", nlohmann::json{{"dataset", {{"dir", data}}}}.dump());
  const std::vector<LawPoint> here = law_points_from_runs({root + "/with_data"});
  ASSERT_EQ(here.size(), 1u);
  EXPECT_EQ(here[0].train_bytes, 5e5);
  fs::remove_all(root + "/with_data");
  // A points file (as --fit-only prints them) adds recorded points to the run folders' ones.
  const std::string pts_file = root + "/points.jsonl";
  {
    std::ofstream f(pts_file);
    f << law_point_json(LawPoint{"elsewhere/d2", 4e5, 9e6, 1.9, ""}).dump() << "\n\n"
      << R"({"matrix_params": 3e6, "train_bytes": 2e7, "bpb": 1.7})" << "\n";
  }
  const std::vector<LawPoint> more = law_points_from_runs({root, pts_file});
  ASSERT_EQ(more.size(), 4u);
  EXPECT_EQ(more[0].run, "elsewhere/d2");
  EXPECT_EQ(more[0].train_bytes, 9e6);
  EXPECT_EQ(more[1].matrix_params, 3e6);
  EXPECT_EQ(more[1].run, pts_file + ":3");
  EXPECT_EQ(more[3].bpb, 2.2);
  for (const char* bad : {R"({"matrix_params": 3e6, "bpb": 1.7})", R"({"matrix_params": 3e6, "train_bytes": -1, "bpb": 1.7})",
                          "not json"}) {
    std::ofstream(pts_file) << bad << "\n";
    try {
      law_points_from_runs({pts_file});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << e.what();
    }
  }
  fs::remove_all(root);
}

TEST(ExpPlan, PlanOnTheCpuRanksCandidatesAndWritesATrainableConfig) {
  // Runs generated from a known law: bigger models and more bytes are both better, so in a budget
  // the plan trades one against the other.
  const std::string root = temp_dir("plan");
  const ScalingLaw truth = known_law();
  for (int d : {4, 5, 6})
    for (double tokens : {1e5, 1e6, 1e7}) {
      const double n = double(count_params(load_config(fmt::format("d{}", d), {"vocab_size=512"}).model).matrix);
      write_run(fs::path(root) / fmt::format("d{}-{}", d, int64_t(tokens)), d, tokens, truth.predict(n, tokens * 4.0));
    }
  PlanOptions o;
  o.budget_seconds = 60;
  o.device = "cpu";
  o.runs = {root};
  o.sets = {"model.seq_len=64", "train.micro_batch=2", "train.batch_tokens=128"};
  o.min_depth = 4;
  o.max_depth = 6;
  o.measure_top = 1;
  o.threads = 1;
  o.progress = false;
  o.presets = false;
  const PlanResult r = make_plan(o);
  ASSERT_EQ(r.ranked.size(), 3u);
  EXPECT_TRUE(r.ranked.front().measured);  // the winner is always timed
  for (size_t i = 1; i < r.ranked.size(); ++i)
    EXPECT_LE(r.ranked[i - 1].predicted_bpb, r.ranked[i].predicted_bpb);
  for (const PlanCandidate& c : r.ranked) {
    EXPECT_GT(c.tokens_per_second, 0);
    EXPECT_NEAR(c.tokens, c.tokens_per_second * 60, 1e-6 * c.tokens);
    EXPECT_EQ(c.cfg.model.seq_len, 64);  // the overrides reach every candidate
    EXPECT_NEAR(c.predicted_bpb, r.law.predict(c.matrix_params, c.bytes), 1e-12);
  }
  EXPECT_NE(format_plan(r).find("timed"), std::string::npos);

  // The command writes the winner's config; it loads and validates as a config file.
  const std::string out = root + "/best.json";
  std::string text;
  ASSERT_EQ(run_clocklm("plan --budget 1m --device cpu --runs " + root +
                            " --min-depth 4 --max-depth 5 --measure 1 --threads 1 --no-presets --set model.seq_len=64"
                            " --set train.micro_batch=2 --set train.batch_tokens=128 --out " + out,
                        &text),
            0)
      << text;
  EXPECT_NE(text.find("best: d"), std::string::npos) << text;
  const RunConfig best = load_config(out);
  EXPECT_EQ(best.model.seq_len, 64);
  EXPECT_EQ(best.train.budget_seconds, 60);
  // Bad input: a message naming the problem, nothing written.
  const std::string none = root + "/none.json";
  EXPECT_NE(run_clocklm("plan --budget 1m --runs " + root + "/missing --out " + none, &text), 0);
  EXPECT_NE(text.find("no such run folder"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(none));
  fs::remove_all(root);
}

TEST(ExpPlan, DepthRuleReachesBelowThePresetsAndWritesAConfig) {
  const RunConfig d3 = depth_config(3);
  EXPECT_EQ(d3.model.n_layer, 3);
  EXPECT_EQ(d3.model.d_model, 192);
  EXPECT_EQ(d3.name, "d3");
  // The named presets are members of the same rule.
  EXPECT_EQ(to_json(depth_config(6)).dump(), to_json(load_config("d6")).dump());
  EXPECT_THROW(depth_config(0), Error);
  const std::string root = temp_dir("depth"), file = root + "/d3.json";
  std::string text;
  ASSERT_EQ(run_clocklm("model --depth 3 --set model.seq_len=256 --write " + file, &text), 0) << text;
  const RunConfig back = load_config(file);
  EXPECT_EQ(back.model.n_layer, 3);
  EXPECT_EQ(back.model.seq_len, 256);
  EXPECT_EQ(back.optim.embed.lr, d3.optim.embed.lr);
  EXPECT_NE(run_clocklm("model", &text), 0);
  EXPECT_NE(text.find("--depth N"), std::string::npos) << text;
  fs::remove_all(root);
}

TEST(ExpPlan, BuiltInLawPredictsLessForMoreDataAndSize) {
  const ScalingLaw l = default_scaling_law();
  EXPECT_GT(l.points, 0);
  EXPECT_LT(l.predict(3e6, 100e6), l.predict(3e6, 10e6));
  EXPECT_LT(l.predict(10e6, 10e6), l.predict(1e6, 10e6));
  // Within its runs' range it reproduces them to about its residual (d4, 281 steps of 4096 tokens
  // at 4.0 bytes/token scored 2.065 bpb on the tuning split).
  EXPECT_NEAR(l.predict(double(count_params(load_config("d4", {"vocab_size=8192"}).model).matrix),
                        281 * 4096 * 4.0),
              2.065, 0.05);
}

TEST(ExpPlan, TrainConfigAutoPlansThenTrainsTheWinner) {
  // The tiny dataset with the byte counts `prepare` records (the plan reads bytes per token).
  const std::string data = temp_dir("autodata"), run = temp_dir("autorun");
  fs::copy(tiny_dataset(), data, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  nlohmann::json m = nlohmann::json::parse(read_file(data + "/manifest.json"));
  for (const char* split : {"train", "val"}) {
    const double tokens = m["splits"][split]["shards"][0]["tokens"].get<double>();
    m["splits"][split]["tokens"] = tokens;
    m["splits"][split]["bytes"] = tokens * 4.0;
  }
  atomic_write(data + "/manifest.json", m.dump(2));
  std::string text;
  ASSERT_EQ(run_clocklm("train --config auto --budget 2s --data " + data + " --out " + run +
                            " --device cpu --quiet --set model.seq_len=64 --set train.micro_batch=2"
                            " --set train.batch_tokens=128 --set val_tokens=1024 --set train.threads=1",
                        &text),
            0)
      << text;
  EXPECT_NE(text.find("--config auto chose "), std::string::npos) << text;
  EXPECT_NE(text.find("val_bpb "), std::string::npos) << text;
  const nlohmann::json plan = nlohmann::json::parse(read_file(run + "/plan.json"));
  EXPECT_EQ(plan["budget_seconds"], 2);
  EXPECT_TRUE(plan["candidates"][0]["measured"].get<bool>());
  // The run trained the chosen config (RUN/auto.json), overrides included.
  const RunConfig chosen = load_config(run + "/auto.json");
  const RunConfig used = load_config(run + "/config.json");
  EXPECT_EQ(used.model.n_layer, chosen.model.n_layer);
  EXPECT_EQ(used.model.seq_len, 64);
  // --resume continues with RUN/config.json; auto is for new runs only.
  EXPECT_NE(run_clocklm("train --config auto --resume " + run + " --data " + data, &text), 0);
  EXPECT_NE(text.find("--config auto starts a new run"), std::string::npos) << text;
  fs::remove_all(data);
  fs::remove_all(run);
}

TEST(ExpPlan, RecipeFamiliesNameWhatTheLawDoesNotSee) {
  EXPECT_EQ(recipe_family(depth_config(4)), "seq1024");
  EXPECT_EQ(recipe_family(depth_config(9)), "seq1024");  // size is the law's, not the family's
  EXPECT_EQ(recipe_family(load_config("speedrun-10m")), "seq256+ve+polar+bsched");
  EXPECT_EQ(recipe_family(load_config("speedrun-30m")), "seq1024+ve+polar");
  EXPECT_EQ(recipe_family(load_config("d4", {"model.seq_len=512", "train.seq_schedule=256@0.5"})),
            "seq512+seqsched");
  // The matrix optimizer comes last, so that its variant extends its recipe's name.
  EXPECT_EQ(recipe_family(load_config("speedrun-30m", {"optim.matrix.kind=normuon"})), "seq1024+ve+polar+normuon");
}

TEST(ExpPlan, FamilyCorrectionsRecoverAKnownTrendWithLeaveOneOut) {
  const ScalingLaw law = known_law();
  // A family 0.1 bpb better at 1 MB whose edge shrinks by 0.02 per e-fold of data; a family that
  // extends its name, with runs at one amount of data and an extra 0.01; the base's own runs.
  auto corr = [](double d) { return -0.1 + 0.02 * std::log(d / 1e6); };
  std::vector<LawPoint> pts;
  for (double d : {2e6, 8e6, 30e6}) {
    pts.push_back({"b", 2e6, d, law.predict(2e6, d), ""});
    pts.push_back({"s", 1e6, d, law.predict(1e6, d) + corr(d), "seq256"});
  }
  pts.push_back({"v1", 1e6, 8e6, law.predict(1e6, 8e6) + corr(8e6) - 0.01, "seq256+ve"});
  pts.push_back({"v2", 3e6, 8e6, law.predict(3e6, 8e6) + corr(8e6) - 0.01, "seq256+ve"});
  const RecipeModel m = fit_recipe_model(law, "seq1024", pts);
  ASSERT_EQ(m.families.size(), 2u);
  EXPECT_EQ(m.base.points, 3);
  const FamilyFit& s = m.families[0];
  EXPECT_EQ(s.family, "seq256");
  EXPECT_NEAR(s.a, -0.1, 1e-9);
  EXPECT_NEAR(s.b, 0.02, 1e-9);
  EXPECT_NEAR(s.loo_abs_error, 0, 1e-9);  // exact data: each run is predicted exactly without itself
  const FamilyFit& v = m.families[1];
  EXPECT_EQ(v.family, "seq256+ve");
  EXPECT_EQ(v.slope_from, "seq256");  // one amount of data: the slope of the family it extends
  EXPECT_NEAR(v.b, 0.02, 1e-9);
  EXPECT_NEAR(v.a, -0.11, 1e-9);
  // Predictions: within the data no caution; outside it, or for a family without runs, a note.
  const RecipePrediction in = m.predict("seq256", 1.5e6, 10e6);
  EXPECT_NEAR(in.bpb, law.predict(1.5e6, 10e6) + corr(10e6), 1e-9);
  EXPECT_TRUE(in.note.empty()) << in.note;
  EXPECT_GE(in.error, 0);
  EXPECT_NE(m.predict("seq256", 1.5e6, 500e6).note.find("outside its runs"), std::string::npos);
  EXPECT_NE(m.predict("seq256", 80e6, 10e6).note.find("matrix params is outside"), std::string::npos);
  const RecipePrediction none = m.predict("seq64+mtp", 1e6, 10e6);
  EXPECT_NEAR(none.bpb, law.predict(1e6, 10e6), 1e-12);
  EXPECT_LT(none.error, 0);
  EXPECT_NE(none.note.find("no runs of this family"), std::string::npos) << none.note;
  // Noise shows in the leave-one-out error.
  pts[1].bpb += 0.02;
  EXPECT_GT(fit_recipe_model(law, "seq1024", pts).families[0].loo_abs_error, 0.005);
}

TEST(ExpPlan, BuiltInFamiliesSeeShortRowsWinEarlyAndFadeLater) {
  const RecipeModel m = default_recipe_model();
  RunConfig d3 = depth_config(3);
  d3.model.vocab_size = 8192;
  const double n = double(count_params(d3.model).matrix);
  const double d_short = 3e6 * 4.03, d_long = 30e6 * 4.03;  // ~5 and ~60 minutes of a 2-core CPU
  const std::string sr = recipe_family(load_config("speedrun-10m"));
  auto edge = [&](double d) { return m.predict(sr, n, d).bpb - m.predict("seq1024", n, d).bpb; };
  EXPECT_LT(edge(d_short), -0.05);         // the 10-minute recipe is far ahead in a short budget
  EXPECT_GT(edge(d_long), edge(d_short));  // and its edge shrinks with more data, as its runs show
  for (const FamilyFit& f : m.families) {
    EXPECT_GT(f.points, 0) << f.family;
    EXPECT_TRUE(f.points < 2 || f.loo_abs_error >= 0) << f.family;
  }
}

TEST(ExpPlan, RecipeAtAnotherDepthKeepsEverythingButTheShape) {
  const RunConfig sr = load_config("speedrun-10m");
  const RunConfig v = recipe_at_depth(sr, 2);
  EXPECT_EQ(v.name, "speedrun-10m@d2");
  EXPECT_EQ(v.model.n_layer, 2);
  EXPECT_EQ(v.model.d_model, 128);
  EXPECT_EQ(v.model.n_head, 2);
  EXPECT_EQ(v.model.n_kv_head, 2);
  EXPECT_EQ(v.model.value_embeds, 2) << "a value embedding in every block stays in every block";
  EXPECT_FLOAT_EQ(v.optim.embed.lr, float(0.2 * std::sqrt(768.0 / 128)));
  EXPECT_FLOAT_EQ(v.optim.head.lr, float(0.004 * std::sqrt(768.0 / 128)));
  // The recipe: row length, features, optimizer, batch and its schedule, budget.
  EXPECT_EQ(v.model.seq_len, sr.model.seq_len);
  EXPECT_EQ(v.optim.matrix.ns_coeffs, sr.optim.matrix.ns_coeffs);
  EXPECT_EQ(v.optim.matrix.lr, sr.optim.matrix.lr);
  EXPECT_EQ(v.train.batch_tokens, sr.train.batch_tokens);
  EXPECT_EQ(v.train.batch_schedule, sr.train.batch_schedule);
  EXPECT_EQ(v.train.micro_batch, sr.train.micro_batch);
  EXPECT_EQ(v.train.budget_seconds, sr.train.budget_seconds);
  EXPECT_EQ(recipe_family(v), recipe_family(sr));
  RunConfig w = v;
  w.model.vocab_size = 512;
  EXPECT_NO_THROW(validate(w));
  // At the recipe's own depth only the name changes.
  RunConfig same = recipe_at_depth(sr, 3);
  same.name = sr.name;
  EXPECT_EQ(to_json(same).dump(), to_json(sr).dump());
  // A count of value embeddings below the depth stays a count; grouped attention keeps its ratio.
  RunConfig g = sr;
  g.model.value_embeds = 1;
  g.model.n_layer = 4, g.model.d_model = 256, g.model.n_head = 4, g.model.n_kv_head = 2;
  const RunConfig g6 = recipe_at_depth(g, 6);
  EXPECT_EQ(g6.model.value_embeds, 1);
  EXPECT_EQ(g6.model.n_head, 6);
  EXPECT_EQ(g6.model.n_kv_head, 3);
}

// The presets and their recipes at nearby depths are candidates. Whatever the timings, the choice
// obeys one rule: the chosen row is timed; every candidate predicted better than it is a variant not
// better than its preset by more than its error; a chosen variant clears its (timed) preset by more.
TEST(ExpPlan, PresetsAndVariantsAreCandidatesAndTheChoiceIsExplained) {
  PlanOptions o;
  o.budget_seconds = 300;
  o.device = "cpu";
  o.sets = {"train.threads=1"};
  o.min_depth = 2;
  o.max_depth = 4;
  o.measure_top = 1;
  o.retime_rounds = 0;
  o.threads = 1;
  o.progress = false;
  const PlanResult r = make_plan(o);
  int presets = 0;
  for (const PlanCandidate& c : r.ranked) {
    EXPECT_EQ(c.family, recipe_family(c.cfg)) << c.cfg.name;
    if (!c.preset) continue;
    ++presets;
    EXPECT_NE(c.cfg.name.rfind("d", 0), 0u) << "the d<N> presets are the rule's own depths";
  }
  EXPECT_GE(presets, 3);  // the three speedrun presets at least
  EXPECT_NE(r.choice.find(r.ranked.front().cfg.name), std::string::npos) << r.choice;
  EXPECT_NE(format_plan(r).find("chosen: "), std::string::npos);
  EXPECT_TRUE(r.to_json()["candidates"][0].contains("predicted_error"));
  auto find = [&](const std::string& name) -> const PlanCandidate* {
    for (const PlanCandidate& c : r.ranked)
      if (c.cfg.name == name) return &c;
    return nullptr;
  };
  int variants = 0;
  for (const PlanCandidate& c : r.ranked) {
    if (c.variant_of.empty()) continue;
    ++variants;
    const PlanCandidate* p = find(c.variant_of);
    ASSERT_NE(p, nullptr) << c.cfg.name;
    EXPECT_TRUE(p->preset);
    EXPECT_EQ(c.family, p->family);
    EXPECT_NE(c.cfg.model.n_layer, p->cfg.model.n_layer);
    EXPECT_LE(std::abs(c.cfg.model.n_layer - p->cfg.model.n_layer), o.variant_reach);
  }
  EXPECT_NE(find("speedrun-10m@d2"), nullptr);
  EXPECT_NE(find("speedrun-10m@d4"), nullptr);
  EXPECT_EQ(find("speedrun-10m@d5"), nullptr) << "beyond --max-depth";
  EXPECT_GE(variants, 4);  // both speedrun presets at d2 and d4
  const PlanCandidate& best = r.ranked.front();
  EXPECT_TRUE(best.measured);
  // speedrun-5m is the preset made for 300 s; its recipe is speedrun-10m's with another budget,
  // so it adds no variants of its own.
  const PlanCandidate* made_for = find("speedrun-5m");
  ASSERT_NE(made_for, nullptr);
  EXPECT_EQ(made_for->made_for_seconds, 300);
  EXPECT_EQ(find("speedrun-5m@d2"), nullptr);
  auto clears = [](const PlanCandidate& c, const PlanCandidate& ref) {
    return c.predicted_error >= 0 && ref.predicted_bpb - c.predicted_bpb > c.predicted_error;
  };
  for (const PlanCandidate& c : r.ranked) {
    if (!c.fits || !(c.predicted_bpb < best.predicted_bpb)) continue;
    const bool under_its_preset = !c.variant_of.empty() && !clears(c, *find(c.variant_of));
    const bool under_the_budgets = made_for->fits && &c != made_for && !clears(c, *made_for);
    EXPECT_TRUE(under_its_preset || under_the_budgets)
        << c.cfg.name << " is predicted better than the chosen " << best.cfg.name;
    EXPECT_NE(r.choice.find("passed over " + c.cfg.name), std::string::npos) << r.choice;
  }
  if (!best.variant_of.empty()) {
    const PlanCandidate* p = find(best.variant_of);
    EXPECT_TRUE(p->measured);
    EXPECT_GT(p->predicted_bpb - best.predicted_bpb, best.predicted_error);
    EXPECT_EQ(r.choice.rfind("variant " + best.cfg.name, 0), 0u) << r.choice;
  }
  EXPECT_EQ(r.to_json()["candidates"][0]["variant_of"], best.variant_of);
  // A model size the family's runs do not cover is said so.
  const PlanCandidate* d4v = find("speedrun-10m@d4");
  EXPECT_NE(d4v->note.find("matrix params is outside its runs"), std::string::npos) << d4v->note;
}

TEST(ExpPlan, AVariantMustBeatItsPresetByMoreThanItsError) {
  auto cand = [](const char* name, double bpb, double err, const char* of, bool preset) {
    PlanCandidate c;
    c.cfg.name = name;
    c.predicted_bpb = bpb;
    c.predicted_error = err;
    c.variant_of = of;
    c.preset = preset;
    return c;
  };
  const PlanCandidate sr = cand("sr", 1.80, 0.02, "", true), d2 = cand("d2", 1.85, 0.02, "", false);
  // Better by less than its error: the preset.
  EXPECT_EQ(choose_candidate({cand("sr@d2", 1.79, 0.02, "sr", false), sr, d2}), 1u);
  // By more: the variant.
  EXPECT_EQ(choose_candidate({cand("sr@d2", 1.77, 0.02, "sr", false), sr, d2}), 0u);
  // With no measure of its error, never.
  EXPECT_EQ(choose_candidate({cand("sr@d2", 1.60, -1, "sr", false), sr, d2}), 1u);
  // A rule depth or a preset needs no margin; a variant whose preset does not fit needs none either.
  EXPECT_EQ(choose_candidate({cand("d3", 1.79, 0.02, "", false), sr, d2}), 0u);
  PlanCandidate big = sr;
  big.fits = false;
  EXPECT_EQ(choose_candidate({cand("sr@d2", 1.79, 0.02, "sr", false), d2, big}), 0u);
  // Two variants within their errors, then a rule depth: the rule depth.
  EXPECT_EQ(choose_candidate({cand("sr@d2", 1.79, 0.02, "sr", false), cand("sr@d4", 1.795, 0.02, "sr", false),
                              cand("d3", 1.797, 0.02, "", false), sr}),
            2u);
}

TEST(ExpPlan, APresetMadeForTheBudgetIsBeatenOnlyByMoreThanTheError) {
  auto cand = [](const char* name, double bpb, double err, bool preset, double made_for) {
    PlanCandidate c;
    c.cfg.name = name;
    c.cfg.train.budget_seconds = 1800;
    c.predicted_bpb = bpb;
    c.predicted_error = err;
    c.preset = preset;
    c.made_for_seconds = made_for;
    return c;
  };
  const PlanCandidate sr30 = cand("sr30", 1.58, 0.04, true, 1800), d4 = cand("d4", 1.70, 0.02, false, 0);
  // Another preset (made for 600 s) predicted better by less than its error: the one made for 1800 s.
  EXPECT_EQ(choose_candidate({cand("sr10", 1.57, 0.03, true, 600), sr30, d4}), 1u);
  // By more than its error: the other preset; a rule depth likewise.
  EXPECT_EQ(choose_candidate({cand("sr10", 1.54, 0.03, true, 600), sr30, d4}), 0u);
  EXPECT_EQ(choose_candidate({cand("d3", 1.57, 0.02, false, 0), sr30, d4}), 1u);
  EXPECT_EQ(choose_candidate({cand("d3", 1.55, 0.02, false, 0), sr30, d4}), 0u);
  // A preset made for 600 s is not the one made for 1800 s (beyond a factor of 1.25): prediction alone.
  PlanCandidate sr10 = cand("sr10", 1.60, 0.03, true, 600);
  EXPECT_EQ(choose_candidate({cand("d3", 1.59, 0.02, false, 0), sr10, d4}), 0u);
  // One made for 1500 s is (within 1.25x); one that does not fit the device is not.
  PlanCandidate near = cand("sr25", 1.60, 0.04, true, 1500);
  EXPECT_EQ(choose_candidate({cand("d3", 1.59, 0.02, false, 0), near, d4}), 1u);
  near.fits = false;
  EXPECT_EQ(choose_candidate({cand("d3", 1.59, 0.02, false, 0), near, d4}), 0u);
}

// Config tests: presets, strict JSON round trip, --set overrides (typed, dotted or unique bare keys),
// validation messages, the config hash, and the CLI's one-line errors for bad configs.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/common.h"
#include "test_cli_util.h"
#include "config/config.h"
#include "model/gpt.h"

using namespace clm;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

using cli_test::CmdResult;
using cli_test::run_cmd;

std::string temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("clocklm_test_config_" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace

TEST(Config, SpeedrunPresetsResolveAndValidate) {
  struct Want {
    const char* name;
    int n_layer, d_model, seq_len, value_embeds;
    double budget;
    int64_t batch_tokens;
    const char* batch_schedule;
    float warmdown_frac, final_lr_frac;
    const char* matrix_kind;
  };
  for (const Want& w : {Want{"speedrun-5m", 3, 192, 256, 3, 300, 8192, "4096@0.5", 0.25f, 0.1f, "muon"},
                        Want{"speedrun-10m", 3, 192, 256, 3, 600, 8192, "4096@0.5", 0.25f, 0.1f, "muon"},
                        Want{"speedrun-30m", 3, 192, 1024, 3, 1800, 4096, "", 0.4f, 0.0f, "muon"}}) {
    RunConfig c = load_config(w.name);
    EXPECT_NO_THROW(validate(c)) << w.name;
    EXPECT_EQ(c.model.n_layer, w.n_layer) << w.name;
    EXPECT_EQ(c.model.d_model, w.d_model) << w.name;
    EXPECT_EQ(c.model.seq_len, w.seq_len) << w.name;
    EXPECT_EQ(c.model.bigram_buckets, 0) << w.name;
    EXPECT_EQ(c.model.value_embeds, w.value_embeds) << w.name;
    EXPECT_EQ(c.train.batch_tokens, w.batch_tokens) << w.name;
    EXPECT_EQ(c.train.batch_schedule, std::string(w.batch_schedule)) << w.name;
    EXPECT_EQ(c.train.budget_seconds, w.budget) << w.name;
    EXPECT_EQ(c.optim.matrix.ns_coeffs, std::string("polar")) << w.name;
    EXPECT_EQ(c.optim.matrix.kind, std::string(w.matrix_kind)) << w.name;
    EXPECT_EQ(c.train.warmdown_frac, w.warmdown_frac) << w.name;
    EXPECT_EQ(c.train.final_lr_frac, w.final_lr_frac) << w.name;
    EXPECT_EQ(preset_made_for_seconds(w.name), w.budget) << w.name;
  }
  EXPECT_EQ(preset_made_for_seconds("baseline-50m"), 0.0);
  EXPECT_EQ(preset_made_for_seconds("d4"), 0.0);
  EXPECT_EQ(preset_made_for_seconds("no-such-preset"), 0.0);
}

TEST(Config, PresetsAreValid) {
  for (const auto& name : preset_names()) {
    RunConfig c = load_config(name);
    EXPECT_EQ(c.name, name);
    EXPECT_NO_THROW(validate(c)) << name;
  }
  RunConfig b = load_config("baseline-50m");
  EXPECT_EQ(b.model.n_layer, 8);
  EXPECT_EQ(b.model.d_model, 512);
  EXPECT_EQ(b.model.vocab_size, 32768);
  EXPECT_FALSE(b.model.tie_embeddings);
  EXPECT_EQ(b.optim.matrix.kind, "muon");
  int64_t n = count_params(b.model).total();
  EXPECT_GT(n, 45'000'000);
  EXPECT_LT(n, 65'000'000);

  RunConfig d12 = load_config("d12");
  EXPECT_EQ(d12.model.n_layer, 12);
  EXPECT_EQ(d12.model.d_model, 768);
  EXPECT_EQ(d12.model.head_dim, 64);
  EXPECT_EQ(d12.model.n_head, 12);
  EXPECT_EQ(d12.model.vocab_size, 0);  // from the dataset
  RunConfig d16 = load_config("d16");
  EXPECT_EQ(d16.model.head_dim, 128);
  EXPECT_EQ(d16.model.n_head, 8);
  RunConfig d17 = load_config("d17");
  EXPECT_EQ(d17.model.head_dim, 64);
  EXPECT_EQ(d17.model.n_head * d17.model.head_dim, d17.model.d_model);
  // Bigger models get bigger batches and smaller AdamW learning rates.
  EXPECT_LT(load_config("d4").train.batch_tokens, load_config("d20").train.batch_tokens);
  EXPECT_GT(load_config("d4").optim.embed.lr, load_config("d20").optim.embed.lr);
  RunConfig byte = load_config("byte-11m");
  EXPECT_EQ(byte.model.vocab_size, 256);
  n = count_params(byte.model).total();
  EXPECT_GT(n, 10'000'000);
  EXPECT_LT(n, 12'000'000);
  EXPECT_NE(error_of([] { load_config("d3"); }), "");
  EXPECT_NE(error_of([] { load_config("d21"); }), "");
}

TEST(Config, OverridesAreTypedAndStrict) {
  RunConfig c = load_config("d8", {"model.n_layer=3", "d_model=256", "n_head=4", "n_kv_head=4", "qk_norm=false",
                                   "optim.matrix.lr=0.05", "matrix.kind=adamw", "train.seed=7", "name=mine"});
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model.d_model, 256);
  EXPECT_FALSE(c.model.qk_norm);
  EXPECT_FLOAT_EQ(c.optim.matrix.lr, 0.05f);
  EXPECT_EQ(c.optim.matrix.kind, "adamw");
  EXPECT_EQ(c.train.seed, 7u);
  EXPECT_EQ(c.name, "mine");
  EXPECT_NE(error_of([] { load_config("d8", {"n_layers=3"}); }).find("unknown config key 'n_layers'"),
            std::string::npos);
  EXPECT_NE(error_of([] { load_config("d8", {"lr=0.1"}); }).find("ambiguous"), std::string::npos);
  EXPECT_NE(error_of([] { load_config("d8", {"n_layer=three"}); }).find("integer"), std::string::npos);
  EXPECT_NE(error_of([] { load_config("d8", {"n_layer=2.5"}); }), "");
  EXPECT_NE(error_of([] { load_config("d8", {"qk_norm=yes"}); }).find("true or false"), std::string::npos);
  EXPECT_NE(error_of([] { load_config("d8", {"n_layer"}); }).find("key=value"), std::string::npos);
}

TEST(Config, ValidationMessages) {
  auto msg = [](std::vector<std::string> ov) { return error_of([&] { load_config("d8", ov); }); };
  EXPECT_NE(msg({"n_head=7"}).find("not divisible by model.n_head"), std::string::npos);
  EXPECT_NE(msg({"n_layer=0"}).find("model.n_layer"), std::string::npos);
  EXPECT_NE(msg({"n_layer=-2"}).find("model.n_layer"), std::string::npos);
  EXPECT_NE(msg({"train.budget_seconds=-5"}).find("budget_seconds"), std::string::npos);
  EXPECT_NE(msg({"activation=tanh"}).find("activation 'tanh'"), std::string::npos);
  EXPECT_NE(msg({"n_kv_head=3"}).find("n_kv_head"), std::string::npos);
  EXPECT_NE(msg({"head_dim=0"}).find("head_dim"), std::string::npos);
  EXPECT_NE(msg({"batch_tokens=1000"}).find("multiple of"), std::string::npos);
  EXPECT_NE(msg({"matrix.kind=sgd"}).find("optim.matrix.kind 'sgd'"), std::string::npos);
  EXPECT_NE(msg({"warmup_frac=0.7", "warmdown_frac=0.7"}).find("warmup_frac"), std::string::npos);
  EXPECT_NE(msg({"warmdown_shape=cosine"}).find("train.warmdown_shape 'cosine'"), std::string::npos);
  EXPECT_NE(msg({"matmul_precision=fp16"}).find("model.matmul_precision 'fp16'"), std::string::npos);
  EXPECT_NE(msg({"matrix.ns_precision=int8"}).find("optim.matrix.ns_precision 'int8'"), std::string::npos);
  for (auto& ov : std::vector<std::string>{"n_head=7", "n_layer=0", "train.budget_seconds=-5"})
    EXPECT_EQ(msg({ov}).find('\n'), std::string::npos) << "multi-line error for " << ov;
}

TEST(Config, JsonRoundTripAndFiles) {
  RunConfig c = load_config("d6", {"model.activation=swiglu", "train.max_steps=5"});
  nlohmann::json j = to_json(c);
  EXPECT_EQ(j["model"]["n_layer"], 6);
  EXPECT_EQ(j["optim"]["matrix"]["kind"], "muon");
  RunConfig back = run_config_from_json(j);
  EXPECT_EQ(to_json(back).dump(), j.dump());
  EXPECT_EQ(j["model"]["matmul_precision"], "auto");
  // Config files written before ns_precision existed carry the boolean ns_bf16.
  nlohmann::json old = j;
  old["optim"]["matrix"].erase("ns_precision");
  old["optim"]["matrix"]["ns_bf16"] = false;
  old["optim"]["head"].erase("ns_precision");
  old["optim"]["head"]["ns_bf16"] = true;
  RunConfig legacy = run_config_from_json(old);
  EXPECT_EQ(legacy.optim.matrix.ns_precision, "fp32");
  EXPECT_EQ(legacy.optim.head.ns_precision, "bf16");

  nlohmann::json bad = j;
  bad["model"]["n_layers"] = 3;
  EXPECT_NE(error_of([&] { run_config_from_json(bad); }).find("'model.n_layers'"), std::string::npos);
  bad = j;
  bad["model"]["n_layer"] = "six";
  EXPECT_NE(error_of([&] { run_config_from_json(bad); }).find("model.n_layer"), std::string::npos);

  std::string dir = temp_dir("files");
  std::string path = dir + "/tiny.json";
  atomic_write(path, R"({"base": "d4", "model": {"n_layer": 2, "vocab_size": 512}, "train": {"seed": 3}})");
  RunConfig f = load_config(path, {"seed=4"});
  EXPECT_EQ(f.name, "tiny");
  EXPECT_EQ(f.model.n_layer, 2);
  EXPECT_EQ(f.model.d_model, 256);  // from base d4
  EXPECT_EQ(f.train.seed, 4u);
  atomic_write(path, R"({"model": {"n_layer": 2, "widht": 3}})");
  EXPECT_NE(error_of([&] { load_config(path); }).find("unknown config key 'model.widht'"), std::string::npos);
  atomic_write(path, R"({"model": {"n_layer": 2,)");
  EXPECT_NE(error_of([&] { load_config(path); }).find("malformed JSON"), std::string::npos);
  EXPECT_NE(error_of([&] { load_config(dir + "/missing.json"); }).find("neither a preset"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Config, HashIgnoresRunLengthOnly) {
  RunConfig a = load_config("d4");
  RunConfig b = load_config("d4", {"budget_seconds=30", "max_steps=9", "eval_every_seconds=5", "name=x"});
  EXPECT_EQ(config_hash(a), config_hash(b));
  RunConfig c = load_config("d4", {"optim.matrix.lr=0.03"});
  EXPECT_NE(config_hash(a), config_hash(c));
  RunConfig d = load_config("d4", {"seed=2"});
  EXPECT_NE(config_hash(a), config_hash(d));
  // A key added later changes the hash only when set away from its default (old runs resume).
  EXPECT_NE(config_hash(a), config_hash(load_config("d4", {"train.warmdown_shape=sqrt"})));
}

TEST(Config, CountParamsByGroup) {
  ModelConfig m;
  m.n_layer = 2;
  m.d_model = 64;
  m.n_head = 2;
  m.n_kv_head = 1;
  m.head_dim = 32;
  m.vocab_size = 100;  // padded to 128
  m.mlp_ratio = 4;
  ParamCount p = count_params(m);
  EXPECT_EQ(p.embed, 128 * 64);
  EXPECT_EQ(p.head, 128 * 64);
  // per layer: wq 64x64, wk/wv 64x32 each, wo 64x64, mlp 2 x 64x256
  EXPECT_EQ(p.matrix, 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 2 * 64 * 256));
  m.tie_embeddings = true;
  EXPECT_EQ(count_params(m).head, 0);
}

TEST(Config, CliRejectsBadConfigsWithOneLine) {
  const std::string bin = CLOCKLM_BINARY;
  for (const char* args : {"--config d8 --set n_layers=3", "--config d8 --set n_head=7",
                           "--config d8 --set n_layer=0", "--config d8 --set train.budget_seconds=-1",
                           "--config no-such-preset"}) {
    CmdResult r = run_cmd(bin + " model " + args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_EQ(r.out.rfind("clocklm: error: ", 0), 0u) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
  }
  CmdResult ok = run_cmd(bin + " model --config baseline-50m");
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("parameters"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("FLOPs per token"), std::string::npos) << ok.out;
}

TEST(Config, AnalyticCountsMatchTheModel) {
  for (auto ov : std::vector<std::vector<std::string>>{
           {},
           {"activation=swiglu", "tie_embeddings=true"},
           {"n_kv_head=1", "norm_gain=true", "activation=gelu", "mlp_ratio=3"},
           {"mtp_weight=0.3", "value_embeds=1"},
           {"mtp_weight=0.5", "tie_embeddings=true"}}) {
    std::vector<std::string> sets = {"n_layer=2", "d_model=64", "n_head=2", "n_kv_head=2", "head_dim=32",
                                     "vocab_size=100", "seq_len=16", "micro_batch=1", "batch_tokens=16"};
    sets.insert(sets.end(), ov.begin(), ov.end());
    RunConfig c = load_config("d4", sets);
    GPT model(c.model, 1, 16);
    ParamCount pc = count_params(c.model);
    int64_t by_kind[4] = {0, 0, 0, 0};
    for (const Param& p : model.params()) by_kind[int(p.kind)] += p.numel();
    EXPECT_EQ(pc.total(), model.num_params()) << ::testing::PrintToString(ov);
    EXPECT_EQ(pc.matrix, by_kind[int(ParamKind::Matrix)]) << ::testing::PrintToString(ov);
    EXPECT_EQ(pc.embed, by_kind[int(ParamKind::Embedding)]) << ::testing::PrintToString(ov);
    EXPECT_EQ(pc.head, by_kind[int(ParamKind::Head)]) << ::testing::PrintToString(ov);
    EXPECT_EQ(pc.scalar, by_kind[int(ParamKind::Scalar)]) << ::testing::PrintToString(ov);
    EXPECT_NEAR(flops_per_token(c.model, 16) / model.flops_per_token(16), 1.0, 1e-9);
  }
}

// Values that do not fit their field are refused instead of converted: a double beyond float's
// range (undefined behaviour to convert), an integer one past int64, nesting deeper than any key,
// shapes beyond any model (their sizes would overflow), durations that overflow to infinity.
TEST(Config, OutOfRangeValuesAreRefused) {
  auto from_text = [](const std::string& text) {
    return error_of([&] { validate(config_from_json_text(text, "c.json", "c")); });
  };
  EXPECT_EQ(from_text(R"({"base": "d4", "model": {"vocab_size": 300}})"), "");
  EXPECT_NE(from_text(R"({"base": "d4", "optim": {"matrix": {"lr": 1e300}}})").find("must be a number"),
            std::string::npos);
  EXPECT_NE(from_text(R"({"train": {"max_steps": 9223372036854775808}})").find("must be an integer"),
            std::string::npos);
  EXPECT_NE(from_text(R"({"train": {"max_steps": 9.3e18}})").find("must be an integer"), std::string::npos);
  EXPECT_NE(from_text(R"({"model": {"a": {"b": {"c": 1}}}})").find("nested too deep"), std::string::npos);
  EXPECT_NE(from_text("[1, 2").find("malformed JSON"), std::string::npos);
  // A number too large for a double is nlohmann's out_of_range, not a parse_error (found by fuzzing).
  EXPECT_NE(from_text(R"({"base": 333332.33333e333})").find("malformed JSON"), std::string::npos);
  EXPECT_NE(error_of([] { load_config("d4", {"optim.matrix.lr=1e39"}); }).find("must be a number"), std::string::npos);
  EXPECT_NE(error_of([] { load_config("d4", {"vocab_size=2147483647"}); }).find("beyond any supported model"),
            std::string::npos);
  EXPECT_NE(error_of([] { load_config("d4", {"n_layer=100000"}); }).find("beyond any supported model"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_duration("1e308h"); }).find("too long"), std::string::npos);
  EXPECT_NE(error_of([] { parse_duration("nan"); }).find("malformed duration"), std::string::npos);
  EXPECT_DOUBLE_EQ(parse_duration("1.5h"), 5400.0);
}

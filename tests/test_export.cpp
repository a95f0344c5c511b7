// `clocklm export` checked by independent readers: the PyTorch reference (python/clocklm_torch.py)
// loads the safetensors export and reproduces `clocklm eval logits` and `clocklm eval bpb`, for a
// default model and for models with every optional feature on; the Hugging Face layout passes the
// nanochat schema and forward written from transformers' source (tests/export/check_hf_nanochat.py)
// and is refused, in one line naming each option, for configs nanochat cannot compute; bad inputs
// leave nothing behind. The Python checks skip, saying why, where python3-torch is missing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "core/common.h"
#include "data/loader.h"
#include "export/safetensors.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "test_cli_util.h"
#include "test_run_util.h"
#include "tok/tokenizer.h"
#include "test_model_util.h"

using namespace clm;
namespace fs = std::filesystem;
using cli_test::run_clocklm;
using cli_test::run_cmd;

namespace {

const fs::path kSource = CLOCKLM_SOURCE_DIR;

// A python3 that imports torch (CLOCKLM_PYTHON, python3, /usr/bin/python3), or "" if none.
const std::string& python_with_torch() {
  static const std::string py = [] {
    std::vector<std::string> c;
    if (const char* e = std::getenv("CLOCKLM_PYTHON")) c.push_back(e);
    c.push_back("python3");
    c.push_back("/usr/bin/python3");
    for (const std::string& p : c)
      if (run_cmd(p + " -c 'import torch' ").status == 0) return p;
    return std::string();
  }();
  return py;
}

std::string torch_script() { return python_with_torch() + " " + (kSource / "python" / "clocklm_torch.py").string(); }

// The Hugging Face tokenizer files of an hf export, loaded by @huggingface/tokenizers (through
// tests/clients/tokenizer_ref.mjs), give the ids of the run's own tokenizer. Says why, and checks
// nothing, where node or the package is missing.
void expect_hf_tokenizer_encodes_as(const std::string& hf_dir, const Tokenizer& tok) {
  if (run_cmd("node --version").status != 0 ||
      !fs::exists(kSource / "tests/clients/node_modules/@huggingface/tokenizers/package.json")) {
    std::printf("hf tokenizer not checked: node or tests/clients' @huggingface/tokenizers is missing\n");
    return;
  }
  const std::vector<std::string> texts = {"The quick brown fox, 1234 times.", "  indented\n\n\tcode() {}",
                                          "caf\xc3\xa9 na\xc3\xafve \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80", ""};
  const fs::path in = fs::path(hf_dir).parent_path() / "hf_texts.json";
  const fs::path got = fs::path(hf_dir).parent_path() / "hf_ids.json";
  atomic_write(in.string(), nlohmann::json(texts).dump());
  auto r = run_cmd("node " + (kSource / "tests/clients/tokenizer_ref.mjs").string() + " hf " + hf_dir +
                   "/tokenizer.json " + in.string() + " " + got.string());
  ASSERT_EQ(r.status, 0) << r.out;
  const auto ids = nlohmann::json::parse(read_file(got.string()));
  ASSERT_EQ(ids.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<uint32_t> want = tok.encode(texts[i]);
    EXPECT_EQ(ids[i].get<std::vector<uint32_t>>(), want) << "text " << i;
  }
}

std::vector<float> read_floats(const std::string& path) {
  std::string b = read_file(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::fabs(double(x)));
  return m;
}

// A tiny model shape; the vocabulary is the tokenizer's plus 3, so the tables have padded rows.
ModelConfig tiny_model(int tok_vocab) {
  ModelConfig m = model_test::tiny_config(
      {.n_head = 2, .n_kv_head = 2, .head_dim = 32, .vocab_size = tok_vocab + 3, .seq_len = 64});
  m.matmul_precision = "fp32";
  return m;
}

// Every optional feature on (gated MLP, tied head, cap), and the other activation and options off
// that the first leaves on (qk_norm off, no cap, multi-token head).
std::vector<std::pair<std::string, ModelConfig>> test_models(int tok_vocab) {
  ModelConfig base = tiny_model(tok_vocab);
  ModelConfig a = base;
  a.n_head = 4;
  a.n_kv_head = 2;
  a.head_dim = 24;  // n_head * head_dim != d_model
  a.value_embeds = 1;
  a.bigram_buckets = 37;
  a.attn_window = 8;
  a.x0_skips = true;
  a.smear = true;
  a.activation = "swiglu";
  a.norm_gain = true;
  a.rope_base = 5000.0f;
  a.norm_eps = 1e-5f;
  a.tie_embeddings = true;
  a.logit_softcap = 20.0f;
  ModelConfig b = a;
  b.activation = "gelu";
  b.qk_norm = false;
  b.tie_embeddings = false;
  b.logit_softcap = 0.0f;
  b.mtp_weight = 0.5f;
  b.n_layer = 3;
  b.value_embeds = 2;
  return {{"default", base}, {"features_swiglu", a}, {"features_gelu", b}};
}

// A run folder RUN/ with one checkpoint of `m` whose every parameter is random (embedding rows of
// RMS about 1, so the nanochat mapping has to rescale), and run.json naming the dataset.
std::string make_run(const fs::path& dir, const ModelConfig& m, uint64_t seed) {
  RunConfig cfg;
  cfg.model = m;
  GPT model(cfg.model, 1, cfg.model.seq_len);
  model.init_weights(seed);
  Rng rng(seed);
  for (Param& p : model.params()) {
    std::vector<float> h(static_cast<size_t>(p.numel()));
    for (float& x : h) {
      const float n = rng.normal();
      x = p.name == "wte" ? n : p.kind == ParamKind::Scalar ? 1.0f + 0.2f * n : 0.08f * n;
    }
    if (p.name.ends_with(".x0_mix")) h = {0.8f, 0.4f};
    p.from_host(h.data());
  }
  Optimizer opt(model.params(), cfg.optim);
  fs::create_directories(dir / "checkpoints");
  save_checkpoint((dir / "checkpoints" / "step_00000001.ckpt").string(), cfg, model, opt, {{"step", 1}});
  atomic_write((dir / "checkpoints" / "latest").string(), "step_00000001.ckpt\n");
  const std::string ds = run_test::tiny_dataset();
  const Tokenizer tok = Tokenizer::load(ds);
  atomic_write((dir / "run.json").string(),
               nlohmann::json({{"dataset", {{"dir", ds}, {"tokenizer_hash", tok.hash()}}}}).dump());
  return dir.string();
}

// Token rows of length T for logits: the BOS first, then random ids.
std::string write_rows(const fs::path& path, int rows, int T, int vocab, uint32_t bos, uint64_t seed) {
  Rng rng(seed);
  std::string text;
  for (int r = 0; r < rows; ++r) {
    text += std::to_string(bos);
    for (int t = 1; t < T; ++t) text += " " + std::to_string(rng.next() % uint64_t(vocab));
    text += "\n";
  }
  atomic_write(path.string(), text);
  return path.string();
}

// The first `n` val rows of T+1 tokens as the loader (and so `eval bpb`) cuts them.
std::string write_val_rows(const fs::path& path, int T, int n) {
  LoaderOptions lo;
  lo.dir = run_test::tiny_dataset();
  lo.split = "val";
  lo.B = 1;
  lo.T = T;
  lo.shuffle = false;
  lo.loop = false;
  DataLoader loader(lo);
  std::vector<int32_t> in(static_cast<size_t>(T)), tg(static_cast<size_t>(T));
  std::string text;
  for (int r = 0; r < n && loader.next(in.data(), tg.data()); ++r) {
    for (int t = 0; t < T; ++t) text += std::to_string(in[size_t(t)]) + " ";
    text += std::to_string(tg[size_t(T - 1)]) + "\n";
  }
  atomic_write(path.string(), text);
  return path.string();
}

fs::path test_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / fmt::format("clocklm_test_export_{}_{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Names in `dir` that an interrupted export would leave (".NAME.tmp.PID", ".NAME.old.PID").
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.starts_with(".") && (n.find(".tmp.") != std::string::npos || n.find(".old.") != std::string::npos))
      out.push_back(n);
  }
  return out;
}

}  // namespace

TEST(ExportSafetensors, HeaderLayoutAndBf16Rounding) {
  std::vector<SafeTensor> ts = {{"a.weight", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"b", {3}, {1.0f + 1.0f / 256, -2, 0.5f}}};
  const std::string h = safetensors_header(ts, SafeDType::BF16, {{"format", "pt"}});
  EXPECT_EQ(h.size() % 8, 0u);
  auto j = nlohmann::json::parse(h);
  EXPECT_EQ(j["__metadata__"]["format"], "pt");
  EXPECT_EQ(j["a.weight"]["dtype"], "BF16");
  EXPECT_EQ(j["a.weight"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(j["a.weight"]["data_offsets"], nlohmann::json({0, 12}));
  EXPECT_EQ(j["b"]["data_offsets"], nlohmann::json({12, 18}));
  fs::path d = test_dir("header");
  const std::string f = (d / "m.safetensors").string();
  write_safetensors(f, ts, SafeDType::BF16, {});
  const std::string blob = read_file(f);
  uint64_t n = 0;
  std::memcpy(&n, blob.data(), 8);
  ASSERT_EQ(blob.size(), 8 + n + 18);
  uint16_t first_b = 0;
  std::memcpy(&first_b, blob.data() + 8 + n + 12, 2);
  EXPECT_EQ(first_b, 0x3f80);  // 1 + 2^-8 is a tie between bf16 neighbours: rounds to even, 1.0
  EXPECT_THROW(safetensors_header({{"x", {2}, {1}}}, SafeDType::F32, {}), Error);
  EXPECT_THROW(safetensors_header({{"x", {1}, {1}}, {"x", {1}, {1}}}, SafeDType::F32, {}), Error);
  fs::remove_all(d);
}

TEST(ExportTorch, ReferenceModuleReproducesLogitsAndBpb) {
  if (python_with_torch().empty()) GTEST_SKIP() << "python3 with torch is not installed (apt-get install python3-torch)";
  const Tokenizer tok = Tokenizer::load(run_test::tiny_dataset());
  fs::path dir = test_dir("torch");
  const std::string ids = write_rows(dir / "ids.txt", 3, 40, int(tok.vocab_size()), tok.bos_id(), 7);
  const std::string val = write_val_rows(dir / "val.txt", 64, 20);
  uint64_t seed = 1;
  for (const auto& [name, m] : test_models(int(tok.vocab_size()))) {
    SCOPED_TRACE(name);
    const std::string run = make_run(dir / name, m, seed++);
    std::string out;
    const std::string ref = (dir / (name + ".clocklm.bin")).string();
    ASSERT_EQ(run_clocklm("eval logits --checkpoint " + run + " --input " + ids + " --out " + ref, &out), 0) << out;
    const std::vector<float> want = read_floats(ref);
    ASSERT_EQ(want.size(), size_t(3) * 40 * m.vocab_size);
    for (const char* dtype : {"fp32", "bf16"}) {
      const std::string ex = (dir / (name + "_" + dtype)).string();
      ASSERT_EQ(run_clocklm("export --checkpoint " + run + " --format safetensors --dtype " + dtype + " --out " + ex, &out), 0)
          << out;
      const std::string got_file = ex + ".torch.bin";
      auto r = run_cmd(torch_script() + " logits " + ex + " --input " + ids + " --out " + got_file);
      ASSERT_EQ(r.status, 0) << r.out;
      const double diff = max_abs_diff(read_floats(got_file), want);
      // fp32 weights: the same function up to summation order. bf16 weights: each weight is rounded
      // to 8 significant bits (relative error up to 2^-9), which moved these logits by 0.4-0.7% of
      // the largest one; the bound is 2% of it (at least 0.02).
      const double tol = std::string(dtype) == "fp32" ? 1e-4 : 0.02 * std::max(1.0, max_abs(want));
      EXPECT_LE(diff, tol) << dtype << " (logits up to " << max_abs(want) << ")";
      std::printf("[ %s %s ] torch vs clocklm logits: max |diff| %.3g (max |logit| %.3g)\n", name.c_str(), dtype, diff,
                  max_abs(want));
    }
    // Bits per byte on the first 1000 val positions: the reference on the loader's rows against `eval bpb`.
    const std::string bj = (dir / (name + ".bpb.json")).string();
    ASSERT_EQ(run_clocklm("eval bpb --checkpoint " + run + " --val-tokens 1000 --batch 4 --json " + bj, &out), 0) << out;
    const double clocklm_bpb = nlohmann::json::parse(read_file(bj))["bpb"].get<double>();
    auto r = run_cmd(torch_script() + " bpb " + (dir / (name + "_fp32")).string() + " --rows " + val + " --val-tokens 1000");
    ASSERT_EQ(r.status, 0) << r.out;
    const double torch_bpb = nlohmann::json::parse(run_test::last_line(r.out))["bpb"].get<double>();
    EXPECT_NEAR(torch_bpb, clocklm_bpb, 1e-5 * clocklm_bpb);
    std::printf("[ %s ] bpb clocklm %.8f torch %.8f (relative %.2g)\n", name.c_str(), clocklm_bpb, torch_bpb,
                std::fabs(torch_bpb - clocklm_bpb) / clocklm_bpb);
  }
  fs::remove_all(dir);
}

TEST(ExportHf, NanochatLayoutComputesClocklmsLogitsAndRefusesWhatItCannot) {
  const Tokenizer tok = Tokenizer::load(run_test::tiny_dataset());
  fs::path dir = test_dir("hf");
  const auto models = test_models(int(tok.vocab_size()));
  std::string out;
  // A model nanochat cannot compute: one line naming every option, nothing written.
  const std::string feat = make_run(dir / "features", models[1].second, 3);
  EXPECT_NE(run_clocklm("export --checkpoint " + feat + " --format hf --out " + (dir / "hf_feat").string(), &out), 0);
  for (const char* opt : {"value_embeds", "x0_skips", "smear", "bigram_buckets", "attn_window", "activation=swiglu",
                          "norm_gain", "head_dim"})
    EXPECT_NE(out.find(opt), std::string::npos) << opt << ": " << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_FALSE(fs::exists(dir / "hf_feat"));
  EXPECT_TRUE(leftovers(dir).empty());
  if (python_with_torch().empty()) GTEST_SKIP() << "python3 with torch is not installed (apt-get install python3-torch)";
  // The default model, its tied variant: schema and forward against clocklm's logits.
  ModelConfig tied = models[0].second;
  tied.tie_embeddings = true;
  tied.logit_softcap = 0;
  tied.n_kv_head = 1;
  uint64_t seed = 11;
  for (const auto& [name, m] : {std::pair{std::string("default"), models[0].second}, std::pair{std::string("tied_mqa"), tied}}) {
    SCOPED_TRACE(name);
    const std::string run = make_run(dir / name, m, seed++);
    const std::string ids = write_rows(dir / "ids.txt", 2, 48, int(tok.vocab_size()), tok.bos_id(), seed);
    const std::string ref = (dir / (name + ".bin")).string();
    ASSERT_EQ(run_clocklm("eval logits --checkpoint " + run + " --input " + ids + " --out " + ref, &out), 0) << out;
    const std::string hf = (dir / (name + "_hf")).string();
    ASSERT_EQ(run_clocklm("export --checkpoint " + run + " --format hf --out " + hf, &out), 0) << out;
    expect_hf_tokenizer_encodes_as(hf, tok);
    auto r = run_cmd(python_with_torch() + " " + (kSource / "tests" / "export" / "check_hf_nanochat.py").string() + " " +
                     hf + " --input " + ids + " --logits " + ref + " --tol 1e-4");
    EXPECT_EQ(r.status, 0) << r.out;
    std::printf("%s", r.out.c_str());
    // bf16 weights: the same schema, logits within 2% of the largest (as for the safetensors format)
    const std::string hf16 = hf + "_bf16";
    ASSERT_EQ(run_clocklm("export --checkpoint " + run + " --format hf --dtype bf16 --out " + hf16, &out), 0) << out;
    const double tol16 = 0.02 * std::max(1.0, max_abs(read_floats(ref)));
    r = run_cmd(python_with_torch() + " " + (kSource / "tests" / "export" / "check_hf_nanochat.py").string() + " " + hf16 +
                " --input " + ids + " --logits " + ref + " --tol " + std::to_string(tol16));
    EXPECT_EQ(r.status, 0) << r.out;
    std::printf("bf16: %s", r.out.c_str());
    // transformers itself, where it can be imported (exit 77: skipped, with the reason printed)
    r = run_cmd(python_with_torch() + " " + (kSource / "bench" / "hf_check.py").string() + " " + hf + " --input " + ids +
                " --logits " + ref);
    EXPECT_TRUE(r.status == 0 || r.status == 77) << r.out;
    std::printf("%s", r.out.c_str());
  }
  fs::remove_all(dir);
}

TEST(ExportCli, BadInputsAreOneLineErrorsAndLeaveNothingBehind) {
  const Tokenizer tok = Tokenizer::load(run_test::tiny_dataset());
  fs::path dir = test_dir("cli");
  const std::string run = make_run(dir / "run", tiny_model(int(tok.vocab_size())), 5);
  std::string out;
  auto refused = [&](const std::string& args, const std::string& want) {
    EXPECT_NE(run_clocklm("export " + args, &out), 0) << args;
    EXPECT_NE(out.find("clocklm: error:"), std::string::npos) << out;
    EXPECT_NE(out.find(want), std::string::npos) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  };
  const std::string o = (dir / "out").string();
  refused("--checkpoint " + (dir / "missing").string() + " --format safetensors --out " + o, "does not exist");
  // A checkpoint still being written: the temporary file of its atomic write.
  const fs::path partial = dir / "run" / "checkpoints" / ".step_00000002.ckpt.tmp.4242";
  fs::copy_file(dir / "run" / "checkpoints" / "step_00000001.ckpt", partial);
  refused("--checkpoint " + partial.string() + " --format safetensors --out " + o, "still being written");
  refused("--checkpoint " + run + " --format gguf --out " + o, "unknown format");
  refused("--checkpoint " + run + " --format safetensors --dtype fp16 --out " + o, "unknown export dtype");
  EXPECT_FALSE(fs::exists(o));
  refused("--checkpoint " + run + " --format safetensors --force --out " + run, "an input of this command");
  EXPECT_TRUE(fs::exists(dir / "run" / "checkpoints" / "step_00000001.ckpt"));
  // A folder of someone else's files is never replaced, even with --force.
  fs::create_directories(o);
  atomic_write(o + "/keep.txt", "x");
  refused("--checkpoint " + run + " --format safetensors --out " + o, "--force");
  refused("--checkpoint " + run + " --format safetensors --out " + o + " --force", "not a folder clocklm exported");
  EXPECT_TRUE(fs::exists(o + "/keep.txt"));
  fs::remove_all(o);
  // An earlier export is replaced only with --force, and only once the new one is complete.
  ASSERT_EQ(run_clocklm("export --checkpoint " + run + " --format safetensors --out " + o, &out), 0) << out;
  refused("--checkpoint " + run + " --format safetensors --out " + o, "--force");
  ASSERT_EQ(run_clocklm("export --checkpoint " + run + " --format safetensors --out " + o + " --force", &out), 0) << out;
  for (const char* f : {"model.safetensors", "clocklm_config.json", "clocklm_tokenizer.json"})
    EXPECT_TRUE(fs::exists(fs::path(o) / f)) << f;
  auto cfg = nlohmann::json::parse(read_file(o + "/clocklm_config.json"));
  EXPECT_EQ(cfg["format"], "clocklm-export");
  EXPECT_EQ(cfg["model"]["vocab_size"], int(tok.vocab_size()) + 3);
  EXPECT_EQ(Tokenizer::load(o + "/clocklm_tokenizer.json").hash(), tok.hash());
  // A run whose dataset is gone and no --tokenizer: refused before anything is written.
  atomic_write((dir / "run" / "run.json").string(),
               nlohmann::json({{"dataset", {{"dir", (dir / "gone").string()}}}}).dump());
  refused("--checkpoint " + run + " --format safetensors --out " + (dir / "out2").string(), "--tokenizer");
  EXPECT_FALSE(fs::exists(dir / "out2"));
  EXPECT_TRUE(leftovers(dir).empty());
  EXPECT_TRUE(leftovers(dir / "run" / "checkpoints").size() == 1);  // the partial file placed above
  fs::remove_all(dir);
}

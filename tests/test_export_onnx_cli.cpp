// `clocklm export --format onnx` end to end: a tiny run trained with the CLI, exported, and run in
// ONNX Runtime (onnxruntime-node): its greedy continuation of a prompt (through model.onnx and
// through the generation variant) is the text `clocklm sample --temperature 0` prints, and its
// logits equal `clocklm eval logits`' within 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/common.h"
#include "test_cli_util.h"
#include "test_exp_util.h"
#include "test_onnx_util.h"
#include "tok/tokenizer.h"

using namespace clm;
namespace fs = std::filesystem;
using cli_test::run_clocklm;

TEST(OnnxExportCli, TrainedRunGreedyAndLogitsMatchClocklm) {
  const std::string why = onnx_test::onnxruntime_missing();
  if (!why.empty()) GTEST_SKIP() << why;
  fs::path dir = fs::temp_directory_path() / ("clocklm_test_onnx_cli_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  exp_test::use_fake_roofline_cache(dir / "cache");
  const std::string data = exp_test::make_tiny_dataset(dir);
  const std::string run = (dir / "run").string(), out = (dir / "onnx").string();
  std::string text;
  // fp32 matmuls, so sampling and ONNX Runtime compute the same function; a few options on so the
  // trained weights reach the bigram hash, value embeddings, the window, the skips and smearing.
  ASSERT_EQ(run_clocklm("train --config d4" + exp_test::tiny_model_args() +
                            " --set model.matmul_precision=fp32 --set model.bigram_buckets=31"
                            " --set model.value_embeds=1 --set model.attn_window=8 --set model.x0_skips=true"
                            " --set model.smear=true"
                            " --budget 3s --device cpu --data " + data + " --out " + run,
                        &text),
            0)
      << text;
  ASSERT_EQ(run_clocklm("export --checkpoint " + run + " --format onnx --out " + out, &text), 0) << text;
  for (const char* f : {"model.onnx", "model_with_past.onnx", "clocklm_config.json", "clocklm_tokenizer.json"})
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f << " missing: " << text;
  EXPECT_NE(run_clocklm("export --checkpoint " + run + " --format onnx --dtype bf16 --out " + out + "_bf16", &text), 0);
  EXPECT_NE(text.find("fp32"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(out + "_bf16"));
  const std::string py = onnx_test::python_with_onnx();
  if (py.empty()) std::printf("python3-onnx is not installed: the exported files are not checked by its checker\n");
  for (const char* f : {"model.onnx", "model_with_past.onnx"})
    if (!py.empty()) {
      auto r = onnx_test::onnx_check(py, (fs::path(out) / f).string());
      EXPECT_EQ(r.status, 0) << f << ": " << r.out;
    }

  // Greedy: the prompt as sample encodes it (BOS, then the text), 12 new tokens.
  const Tokenizer tok = Tokenizer::load((fs::path(out) / "clocklm_tokenizer.json").string());
  const std::string prompt = "the cat sat on";
  std::vector<int32_t> ids{int32_t(tok.bos_id())};
  for (uint32_t t : tok.encode(prompt)) ids.push_back(int32_t(t));
  const int n = 12;
  const std::string model = (fs::path(out) / "model.onnx").string();
  std::vector<std::vector<int32_t>> rows = {ids, ids};
  rows[1][1] = rows[1][2];  // a second row of the same length
  const auto cfg = nlohmann::json::parse(read_file((fs::path(out) / "clocklm_config.json").string()))["model"];
  onnx_test::OrtResult ort =
      onnx_test::run_onnxruntime(model, {rows}, ids, n,
                                 {(fs::path(out) / "model_with_past.onnx").string(), cfg["n_kv_head"].get<int>(),
                                  cfg["head_dim"].get<int>()});
  ASSERT_EQ(ort.greedy.size(), size_t(n));
  EXPECT_EQ(ort.incremental, ort.greedy) << "the generation variant continues as model.onnx does";
  std::vector<uint32_t> cont(ort.greedy.begin(), ort.greedy.end());
  ASSERT_EQ(run_clocklm("sample --checkpoint " + run + " --device cpu --temperature 0 --tokens " + std::to_string(n) +
                            " --prompt '" + prompt + "'",
                        &text),
            0)
      << text;
  const std::string want = prompt + tok.decode(cont) + "\n";
  std::printf("ONNX Runtime greedy: %s", want.c_str());
  ASSERT_GE(text.size(), want.size()) << text;
  EXPECT_EQ(text.substr(text.size() - want.size()), want) << "ONNX Runtime's greedy ids decode to\n" << want;

  // Logits of the trained model: clocklm eval logits against ONNX Runtime.
  std::string rows_txt;
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) rows_txt += (i ? " " : "") + std::to_string(r[i]);
    rows_txt += "\n";
  }
  atomic_write((dir / "rows.txt").string(), rows_txt);
  const std::string zf = (dir / "logits.bin").string();
  ASSERT_EQ(run_clocklm("eval logits --checkpoint " + run + " --device cpu --input " + (dir / "rows.txt").string() +
                            " --out " + zf,
                        &text),
            0)
      << text;
  const std::string raw = read_file(zf);
  ASSERT_EQ(raw.size(), ort.logits[0].size() * 4);
  double worst = 0;
  for (size_t i = 0; i < ort.logits[0].size(); ++i) {
    float z;
    std::memcpy(&z, raw.data() + 4 * i, 4);
    worst = std::max(worst, double(std::fabs(z - ort.logits[0][i])));
  }
  std::printf("trained run: largest |ONNX Runtime - clocklm eval logits| %.3g over %zu logits\n", worst,
              ort.logits[0].size());
  EXPECT_LE(worst, 1e-4);
  fs::remove_all(dir);
}

// End to end: a tiny prepared dataset and a checkpoint of an untrained model in a run folder, then
// `clocklm eval bpb`, `clocklm eval core` and `clocklm sample` through the binary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "core/common.h"
#include "test_cli_util.h"
#include "data/dataset.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "checkpoint/checkpoint.h"
#include "test_model_util.h"

using namespace clm;
namespace fs = std::filesystem;

using cli_test::run_clocklm;

TEST(EvalCli, BpbCoreAndSampleOnACheckpoint) {
  std::string shared = CLOCKLM_SHARED_DATA;
  if (!path_exists(shared + "/tiny/tinyshakespeare.txt")) GTEST_SKIP() << "no shared data";
  fs::path dir = fs::temp_directory_path() / ("clocklm_test_eval_cli_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "run" / "checkpoints");
  std::string ds = (dir / "ds").string();
  std::string out;
  ASSERT_EQ(run_clocklm("prepare -q -i " + shared + "/tiny/tinyshakespeare.txt --txt-doc-bytes 2000 --vocab-size 300 --val-fraction 0.1 -o " + ds, &out), 0) << out;
  DatasetInfo info = read_dataset_info(ds);

  RunConfig cfg;
  cfg.model = model_test::tiny_config(
      {.n_layer = 1, .n_head = 2, .n_kv_head = 2, .head_dim = 32, .vocab_size = int(info.vocab_size), .seq_len = 64});
  GPT model(cfg.model, 1, cfg.model.seq_len);
  model.init_weights(1);  // zero head: every logit equal, so bpb = log2(V) * tokens / bytes
  Optimizer opt(model.params(), cfg.optim);
  std::string ckpt = (dir / "run" / "checkpoints" / "step0.ckpt").string();
  save_checkpoint(ckpt, cfg, model, opt, {{"step", 0}});
  atomic_write((dir / "run" / "checkpoints" / "latest").string(), "step0.ckpt\n");
  atomic_write((dir / "run" / "run.json").string(),
               nlohmann::json({{"dataset", {{"dir", ds}, {"tokenizer_hash", info.tokenizer_hash}}}}).dump());

  std::string js = (dir / "bpb.json").string();
  ASSERT_EQ(run_clocklm("eval bpb --checkpoint " + ckpt + " --val-tokens 1000 --batch 4 --json " + js, &out), 0) << out;
  auto j = nlohmann::json::parse(read_file(js));
  EXPECT_EQ(j["positions"], 1000);
  EXPECT_NEAR(j["bpb"].get<double>(), std::log2((double)info.vocab_size) * j["tokens"].get<double>() / j["bytes"].get<double>(), 1e-4);
  EXPECT_NE(out.find("val bpb"), std::string::npos);

  std::string bundle = shared + "/core";
  if (path_exists(bundle + "/core.yaml")) {
    std::string cj = (dir / "core.json").string();
    ASSERT_EQ(run_clocklm("eval core --quiet --checkpoint " + (dir / "run").string() + " --bundle " + bundle +
                      " --max-per-task 6 --tasks copa,lambada_openai,coqa --json " + cj, &out), 0) << out;
    auto c = nlohmann::json::parse(read_file(cj));
    EXPECT_EQ(c["tasks_evaluated"], 2);
    EXPECT_EQ(c["missing"], nlohmann::json::array({"coqa"}));
    EXPECT_NE(out.find("CORE over 2 of 22 tasks (missing: coqa)"), std::string::npos) << out;
    EXPECT_NE(out.find("Task                               , Accuracy  , Centered"), std::string::npos) << out;
  }

  ASSERT_EQ(run_clocklm("sample --checkpoint " + ckpt + " --prompt 'ROMEO:' --tokens 5 --temperature 0", &out), 0) << out;
  EXPECT_EQ(out.rfind("ROMEO:", 0), 0u) << out;
  EXPECT_NE(run_clocklm("sample --checkpoint " + (dir / "missing.ckpt").string() + " --prompt x", &out), 0);
  EXPECT_NE(out.find("clocklm: error:"), std::string::npos) << out;
  // Damaged checkpoints are refused by every eval command with a one-line error.
  std::string blob = read_file(ckpt), bad = (dir / "bad.ckpt").string();
  std::string flipped = blob;
  flipped[flipped.size() / 2] ^= 0x10;
  for (const auto& [content, want] : std::vector<std::pair<std::string, std::string>>{
           {flipped, "checksum mismatch"}, {blob.substr(0, blob.size() - 9), "truncated"}, {"xx", "truncated"}}) {
    atomic_write(bad, content);
    for (const std::string& cmd : {"eval bpb --data " + ds + " --checkpoint " + bad, "sample --prompt x --checkpoint " + bad}) {
      EXPECT_NE(run_clocklm(cmd, &out), 0) << cmd;
      EXPECT_NE(out.find("clocklm: error: checkpoint " + bad), std::string::npos) << cmd << "\n" << out;
      EXPECT_NE(out.find(want), std::string::npos) << cmd << "\n" << out;
    }
  }
  fs::remove_all(dir);
}

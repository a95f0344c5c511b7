// bpb and CORE with the real GPT: uniform logits give exactly log2(V) bits per token; an untrained
// model's CORE on a few real tasks is near 0; the cached scorer agrees with GPT::forward on CORE.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/common.h"
#include "eval/bpb.h"
#include "eval/core.h"
#include "eval/kv_decode.h"
#include "model/gpt.h"

using namespace clm;

namespace {

ModelConfig byte_model(int seq_len) {
  ModelConfig c;
  c.n_layer = 2;
  c.d_model = 64;
  c.n_head = 4;
  c.n_kv_head = 4;
  c.head_dim = 16;
  c.vocab_size = 257;  // 256 bytes + BOS (id 256)
  c.seq_len = seq_len;
  return c;
}

CoreEncoder byte_encoder() {
  return [](const std::vector<std::string_view>& texts) {
    std::vector<std::vector<uint32_t>> out;
    for (auto t : texts) out.emplace_back(t.begin(), t.end());
    for (auto& v : out)
      for (auto& x : v) x &= 0xFF;
    return out;
  };
}

}  // namespace

TEST(EvalGpt, UniformLogitsGiveLog2VBitsPerToken) {
  ModelConfig c = byte_model(32);
  const int B = 2, T = 32;
  GPT model(c, B, T);
  model.init_weights(1);  // zero_init_out: the LM head is zero, so every logit is 0
  for (auto& p : model.params()) {
    if (p.name == "lm_head") {
      ASSERT_EQ(p.data[0], 0.0f);
    }
  }
  model.set_grad_enabled(false);
  // Byte lengths: 1 for the 256 bytes, 0 for BOS; a stream of bytes with a BOS every 50.
  std::vector<uint32_t> bytes(257, 1);
  bytes[256] = 0;
  std::vector<int32_t> stream;
  for (int i = 0; i < 1000; i++) stream.push_back(i % 50 == 0 ? 256 : (i * 31) % 256);
  size_t pos = 0;
  auto src = [&](int32_t* in, int32_t* tg) {
    if (pos + B * T + 1 > stream.size()) return false;
    for (int i = 0; i < B * T; i++) { in[i] = stream[pos + i]; tg[i] = stream[pos + i + 1]; }
    pos += B * T;
    return true;
  };
  auto score = [&](const int32_t* in, const int32_t* tg, int b, int t, float* loss) {
    model.forward(in, tg, b, t, loss, nullptr);
  };
  BpbResult r = eval_bpb(src, score, bytes, 300, B, T);
  EXPECT_EQ(r.positions, 300);
  EXPECT_EQ(r.tokens, 300 - 6);  // targets 50, 100, ..., 300 are BOS
  EXPECT_EQ(r.bytes, r.tokens);
  EXPECT_NEAR(r.bpb, std::log2(257.0) * r.tokens / r.bytes, 1e-5);
}

TEST(EvalGpt, UntrainedModelCoreIsNearZero) {
  std::string bundle = std::string(CLOCKLM_SHARED_DATA) + "/core";
  if (!path_exists(bundle + "/core.yaml")) GTEST_SKIP() << "no shared CORE bundle";
  ModelConfig c = byte_model(256);  // long prompts are cropped from the left to 256 bytes
  const int B = 8;
  GPT model(c, B, c.seq_len);
  model.init_weights(1337);
  model.set_grad_enabled(false);
  KVDecoder dec(model, B, c.seq_len);
  CoreModel m;
  m.encode = byte_encoder();
  m.bos = 256;
  m.context = c.seq_len;
  m.max_rows = B;
  m.score = [&](const int32_t* in, const int32_t* tg, int b, int t, float* loss, int32_t* am) {
    dec.reset();
    dec.append(in, b, t);
    dec.score(tg, loss, am);
  };
  m.score_groups = [&](const int32_t* in, const std::vector<PrefixGroup>& g, const int32_t* tg, float* loss,
                       int32_t* am) { dec.score_groups(in, g, tg, loss, am); };
  CoreOptions opt;
  opt.bundle = bundle;
  opt.max_per_task = 32;
  opt.tasks = {"copa", "openbook_qa", "winograd", "lambada_openai", "arc_easy"};
  opt.progress = false;
  nlohmann::json r = eval_core(m, opt);
  EXPECT_EQ(r["tasks_evaluated"], 5);
  EXPECT_EQ(r["tasks_total"], 22);
  // Tolerance: with 32 items a 2-choice task's centered accuracy has sd ~0.18, a 4-choice one ~0.10,
  // LM tasks are exactly 0 for a model that cannot complete text; the mean of 5 has sd ~0.07 (and the draw is deterministic).
  EXPECT_LT(std::fabs(r["core"].get<double>()), 0.2) << r.dump(1);
  EXPECT_DOUBLE_EQ(r["tasks"]["lambada_openai"]["accuracy"].get<double>(), 0.0);
  // Multiple choice computed the shared context once: fewer tokens went through the model.
  EXPECT_LT(r["tasks"]["arc_easy"]["forward_tokens"].get<int64_t>(), r["tasks"]["arc_easy"]["tokens"].get<int64_t>());
  // The plain GPT::forward scorer, every row whole, gives the same per-task accuracies.
  CoreModel f = m;
  f.score_groups = nullptr;
  f.score = [&](const int32_t* in, const int32_t* tg, int b, int t, float* loss, int32_t* am) {
    model.forward(in, tg, b, t, loss, am);
  };
  opt.tasks = {"copa", "winograd", "arc_easy"};
  nlohmann::json rf = eval_core(f, opt);
  for (const char* t : {"copa", "winograd", "arc_easy"}) EXPECT_EQ(rf["tasks"][t]["correct"], r["tasks"][t]["correct"]) << t;
}

// Group scoring (shared prefix once) against every row whole, on real multiple-choice items with
// long few-shot prompts, some cropped from the left: the same mean losses and greedy matches.
TEST(EvalGpt, CoreGroupScoringEqualsWholeRows) {
  std::string bundle = std::string(CLOCKLM_SHARED_DATA) + "/core";
  if (!path_exists(bundle + "/core.yaml")) GTEST_SKIP() << "no shared CORE bundle";
  ModelConfig c = byte_model(512);
  c.zero_init_out = false;  // otherwise the head is zero and every row's loss is ln V
  c.init_std = 0.3f;
  GPT model(c, 1, c.seq_len);
  model.init_weights(7);
  model.set_grad_enabled(false);
  KVDecoder dec(model, 4, c.seq_len, /*one_shot=*/true);
  CoreModel m;
  m.encode = byte_encoder();
  m.bos = 256;
  m.context = c.seq_len;
  m.max_rows = 4;
  m.score = [&](const int32_t* in, const int32_t* tg, int b, int t, float* loss, int32_t* am) {
    dec.reset();
    dec.append(in, b, t);
    dec.score(tg, loss, am);
  };
  CoreModel g = m;
  g.score_groups = [&](const int32_t* in, const std::vector<PrefixGroup>& gr, const int32_t* tg, float* loss,
                       int32_t* am) { dec.score_groups(in, gr, tg, loss, am); };
  std::vector<CoreTask> tasks = load_core_tasks(bundle);
  for (const char* label : {"arc_easy", "bigbench_language_identification"}) {
    const CoreTask& task = *std::find_if(tasks.begin(), tasks.end(), [&](const CoreTask& t) { return t.label == label; });
    std::vector<nlohmann::json> items = load_core_items(bundle + "/eval_data/" + task.dataset_uri);
    core_shuffle(items);
    items.resize(6);
    std::vector<CoreExample> exs;
    for (int i = 0; i < (int)items.size(); i++) {
      std::vector<const nlohmann::json*> shots;
      for (int64_t s : core_fewshot_indices((int64_t)items.size(), i, std::min(task.num_fewshot, 3))) shots.push_back(&items[s]);
      std::vector<std::string> prompts = render_core_prompts(task, items[i], shots);
      std::vector<std::string_view> views(prompts.begin(), prompts.end());
      std::vector<std::vector<int32_t>> toks;
      for (const auto& e : m.encode(views)) {
        toks.push_back({256});
        toks.back().insert(toks.back().end(), e.begin(), e.end());
      }
      exs.push_back(build_core_example(task.type, toks, items[i]["gold"].get<int>(), c.seq_len));
    }
    int64_t fw_whole = 0, fw_group = 0;
    auto a = score_core_examples(m, exs, &fw_whole);
    auto b = score_core_examples(g, exs, &fw_group);
    EXPECT_LT(fw_group, fw_whole) << label;
    for (size_t e = 0; e < exs.size(); e++)
      for (size_t r = 0; r < exs[e].rows.size(); r++) {
        EXPECT_NEAR(a[e][r].mean_loss, b[e][r].mean_loss, 1e-3) << label << " item " << e << " row " << r;
        EXPECT_EQ(a[e][r].all_match, b[e][r].all_match) << label << " item " << e << " row " << r;
      }
  }
}

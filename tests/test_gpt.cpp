// Whole-model tests of the GPT: parameter naming/routing, untrained loss ~ ln(vocab), a finite-
// difference gradient check of every parameter tensor on tiny configs (fp32 matmuls), bf16 vs fp32
// agreement, determinism, gradient accumulation, last_logits consistency, and the features that
// are config keys (bigram and value embeddings, skips, windows, the multi-token head).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "core/common.h"
#include "model/gpt.h"
#include "test_model_util.h"

using namespace clm;

namespace {

ModelConfig tiny(const std::string& act = "relu2") {
  // vocab 37 is padded to 64
  ModelConfig c = model_test::tiny_config(
      {.d_model = 32, .head_dim = 8, .mlp_ratio = 2.0f, .vocab_size = 37, .seq_len = 16});
  c.activation = act;
  c.logit_softcap = 5.0f;
  return c;
}

// The multi-token head's loss in the model's auxiliary losses (0 when it lists none).
double mtp_loss_of(const GPT& m) {
  for (const auto& [name, v] : m.aux_losses())
    if (name == "mtp_loss") return v;
  return 0.0;
}

std::vector<int32_t> tokens(int n, int V, uint64_t seed) { return model_test::random_tokens(size_t(n), V, seed); }

}  // namespace

TEST(GPT, ParamNamesShapesAndKinds) {
  ModelConfig c = tiny("swiglu");
  c.norm_gain = true;
  GPT m(c, 2, 8);
  std::map<std::string, const Param*> by;
  for (auto& p : m.params()) by[p.name] = &p;
  ASSERT_TRUE(by.count("wte"));
  EXPECT_EQ(by["wte"]->kind, ParamKind::Embedding);
  EXPECT_EQ(by["wte"]->shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(by["lm_head"]->kind, ParamKind::Head);
  EXPECT_EQ(by["blocks.1.attn.wq"]->shape, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(by["blocks.1.attn.wk"]->shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(by["blocks.0.attn.wo"]->kind, ParamKind::Matrix);
  EXPECT_EQ(by["blocks.0.mlp.w_gate"]->shape, (std::vector<int64_t>{64, 32}));  // 2/3*64 -> 64
  EXPECT_EQ(by["blocks.0.attn.q_norm.gain"]->kind, ParamKind::Scalar);
  EXPECT_EQ(by["final_norm.gain"]->kind, ParamKind::Scalar);
  int64_t n = 0;
  for (auto& p : m.params()) n += p.numel();
  EXPECT_EQ(n, m.num_params());
  // wq|wk|wv and w_in|w_gate are adjacent (one fused matmul each)
  EXPECT_EQ(by["blocks.0.attn.wk"]->data, by["blocks.0.attn.wq"]->data + 32 * 32);
  EXPECT_EQ(by["blocks.0.mlp.w_gate"]->data, by["blocks.0.mlp.w_in"]->data + 64 * 32);
  c.tie_embeddings = true;
  GPT t(c, 1, 4);
  for (auto& p : t.params()) EXPECT_NE(p.name, "lm_head");
}

TEST(GPT, MlpHidden) {
  ModelConfig c;
  c.d_model = 512;
  c.mlp_ratio = 4;
  EXPECT_EQ(c.mlp_hidden(), 2048);
  c.activation = "swiglu";
  EXPECT_EQ(c.mlp_hidden(), 1408);  // 2/3 * 2048 = 1365.3 -> 1408
  c.activation = "relu2";
  c.mlp_ratio = 2.6f;
  EXPECT_EQ(c.mlp_hidden(), 1344);  // 1331.2 -> 1344
}

TEST(GPT, BadShapesAreRefused) {
  ModelConfig c = tiny();
  c.n_kv_head = 3;
  EXPECT_THROW(GPT(c, 1, 4), Error);
  c = tiny();
  c.activation = "tanh";
  EXPECT_THROW(GPT(c, 1, 4), Error);
  GPT m(tiny(), 1, 4);
  m.init_weights(1);
  auto in = tokens(8, 37, 1);
  EXPECT_THROW(m.forward(in.data(), in.data(), 2, 4), Error);  // larger than allocated
  in[0] = 40;
  EXPECT_THROW(m.forward(in.data(), in.data(), 1, 4), Error);  // token out of range
}

// A model allocated for B x T tokens takes the same tokens as more, shorter rows (the training
// loop's train.seq_schedule): each short row is attended on its own, exactly as a model allocated
// for that shape computes it, gradients included; more tokens, or longer rows, are refused.
TEST(GPT, ShorterRowsInTheSameTokens) {
  ModelConfig c = tiny();
  c.zero_init_out = false;
  const int B = 2, T = 16, S = 4, rows = B * T / S;
  auto in = tokens(B * T, 37, 41), tg = tokens(B * T, 37, 42);
  GPT big(c, B, T), exact(c, rows, S), one(c, 1, S);
  for (GPT* m : {&big, &exact, &one}) m->init_weights(5);
  std::vector<float> tl_big(B * T), tl_exact(B * T);
  big.zero_grad();
  exact.zero_grad();
  const float l_big = big.forward(in.data(), tg.data(), rows, S, tl_big.data());
  const float l_exact = exact.forward(in.data(), tg.data(), rows, S, tl_exact.data());
  EXPECT_EQ(l_big, l_exact);
  EXPECT_EQ(tl_big, tl_exact);
  big.backward(1.0f);
  exact.backward(1.0f);
  for (size_t p = 0; p < big.params().size(); ++p) {
    const Param &a = big.params()[p], &b = exact.params()[p];
    ASSERT_EQ(std::memcmp(a.grad, b.grad, sizeof(float) * size_t(a.numel())), 0) << a.name;
  }
  // Each short row alone gives its tokens the same losses: no attention across row boundaries.
  for (int r = 0; r < rows; ++r) {
    std::vector<float> tl(S);
    one.forward(in.data() + r * S, tg.data() + r * S, 1, S, tl.data());
    for (int t = 0; t < S; ++t) EXPECT_NEAR(tl[t], tl_big[r * S + t], 1e-5) << "row " << r << " position " << t;
  }
  EXPECT_THROW(big.forward(in.data(), tg.data(), 1, 2 * T), Error);  // longer rows than allocated
  std::vector<int32_t> more = tokens(3 * T, 37, 43);
  EXPECT_THROW(big.forward(more.data(), more.data(), 3, T), Error);  // more tokens than allocated
}

TEST(GPT, UntrainedLossIsLnVocab) {
  ModelConfig c = tiny();
  c.vocab_size = 300;
  GPT m(c, 2, 16);
  m.init_weights(3);
  auto in = tokens(32, 300, 4), tg = tokens(32, 300, 5);
  float loss = m.forward(in.data(), tg.data(), 2, 16);
  EXPECT_NEAR(loss, std::log(300.0), 1e-4);  // zero-init head: uniform over the real vocab
  c.zero_init_out = false;
  GPT m2(c, 2, 16);
  m2.init_weights(3);
  EXPECT_NEAR(m2.forward(in.data(), tg.data(), 2, 16), std::log(300.0), 0.1);
}

// Finite differences in fp32 through the whole model (fp32 matmuls), sampled coordinates of every
// parameter tensor: the relative error of the sampled gradient vector must be small.
static void whole_model_gradcheck(ModelConfig c) {
  c.zero_init_out = false;
  c.init_std = 0.3f;
  int B = 2, T = 7;
  GPT m(c, B, T);
  m.set_matmul_precision(MatPrec::F32);
  m.init_weights(11);
  for (auto& p : m.params())  // the bigram and value embedding tables start at zero; give them values
    if (p.name == "bigram_embed" || p.name.ends_with(".value_embed")) {
      Rng r(14 + p.numel());
      for (int64_t i = 0; i < p.numel(); ++i) p.data[i] = 0.3f * r.normal();
      m.weights_changed();
    } else if (p.name.ends_with(".x0_mix")) {  // away from the (1, 0) start, so b's path counts
      p.data[0] = 0.8f;
      p.data[1] = 0.6f;
      m.weights_changed();
    } else if (p.name == "smear") {  // lam and the gate away from zero, so every path counts
      Rng r(15);
      for (int64_t i = 0; i < p.numel(); ++i) p.data[i] = i == 0 ? 0.7f : 0.5f * r.normal();
      m.weights_changed();
    }
  auto in = tokens(B * T, c.vocab_size, 12), tg = tokens(B * T, c.vocab_size, 13);
  tg[3] = -1;  // an ignored position
  m.zero_grad();
  m.forward(in.data(), tg.data(), B, T);
  m.backward(1.0f);
  // The objective backward follows: next-token loss, plus the weighted multi-token loss, which
  // only a forward with gradients computes (that forward leaves the parameter gradients alone).
  const bool mtp = c.mtp_weight > 0;
  m.set_grad_enabled(mtp);
  auto objective = [&] {
    double l = m.forward(in.data(), tg.data(), B, T);
    return mtp ? l + double(c.mtp_weight) * mtp_loss_of(m) : l;
  };
  Rng pick(5);
  for (auto& p : m.params()) {
    double num = 0, den = 0;
    for (int s = 0; s < 6; ++s) {
      int64_t i = int64_t(pick.next() % uint64_t(p.numel()));
      if ((p.name == "wte" || p.name == "lm_head") && i >= int64_t(c.vocab_size) * c.d_model)
        i %= int64_t(c.vocab_size) * c.d_model;
      if (p.name.ends_with(".value_embed")) {  // a row of a token the inputs use (others get no gradient)
        const int64_t w = p.shape[1];
        i = int64_t(in[size_t(i / w) % in.size()]) * w + i % w;
      }
      float old = p.data[i];
      float h = 2e-3f;
      p.data[i] = old + h;
      m.weights_changed();
      double lp = objective();
      p.data[i] = old - h;
      m.weights_changed();
      double lm = objective();
      p.data[i] = old;
      double fd = (lp - lm) / (2.0 * h);
      num += (fd - p.grad[i]) * (fd - p.grad[i]);
      den += fd * fd;
    }
    EXPECT_LT(std::sqrt(num), 2e-2 * std::sqrt(den) + 2e-4) << p.name;
  }
}

TEST(GPT, GradientCheckRelu2QkNorm) { whole_model_gradcheck(tiny("relu2")); }

TEST(GPT, GradientCheckSwigluGainsTiedMQA) {
  ModelConfig c = tiny("swiglu");
  c.norm_gain = true;
  c.tie_embeddings = true;
  c.n_kv_head = 1;
  whole_model_gradcheck(c);
}

TEST(GPT, GradientCheckGeluNoQkNormNoCap) {
  ModelConfig c = tiny("gelu");
  c.qk_norm = false;
  c.logit_softcap = 0.0f;
  c.norm_gain = true;
  whole_model_gradcheck(c);
}

TEST(GPT, GradientCheckBigramEmbedding) {
  ModelConfig c = tiny("relu2");
  c.bigram_buckets = 5;  // few rows, so every sampled row is used by the 14 positions
  whole_model_gradcheck(c);
}

// A feature whose table starts at zero: the model with it computes, at initialisation, exactly what
// the same model without it computes.
static void expect_same_start(const ModelConfig& with, const ModelConfig& without) {
  GPT m(with, 2, 8), plain(without, 2, 8);
  m.init_weights(3);
  plain.init_weights(3);
  auto in = tokens(16, with.vocab_size, 1), tg = tokens(16, with.vocab_size, 2);
  EXPECT_EQ(m.forward(in.data(), tg.data(), 2, 8), plain.forward(in.data(), tg.data(), 2, 8));
}

TEST(GPT, GradientCheckSlidingWindow) {
  ModelConfig c = tiny("relu2");
  c.attn_window = 3;  // of 7 positions: later queries lose their first keys
  whole_model_gradcheck(c);
}

TEST(GPT, GradientCheckValueEmbeddings) {
  ModelConfig c = tiny("relu2");  // grouped-query: value rows are n_kv_head * head_dim = 16 wide
  c.value_embeds = 2;             // both blocks
  whole_model_gradcheck(c);
  c = tiny("swiglu");
  c.n_layer = 3;
  c.n_kv_head = 4;
  c.value_embeds = 1;             // the last block only
  whole_model_gradcheck(c);
}

TEST(GPT, ValueEmbeddingShapeCountAndStart) {
  ModelConfig c = tiny();
  c.n_layer = 3;
  c.value_embeds = 2;
  GPT m(c, 2, 8);
  std::vector<std::string> names;
  for (auto& p : m.params())
    if (p.name.ends_with(".value_embed")) {
      names.push_back(p.name);
      EXPECT_EQ(p.kind, ParamKind::Embedding);  // trained with the embeddings' optimizer group
      EXPECT_EQ(p.shape, (std::vector<int64_t>{64, 2 * 8}));  // padded vocab x kv width
    }
  EXPECT_EQ(names, (std::vector<std::string>{"blocks.1.attn.value_embed", "blocks.2.attn.value_embed"}));
  EXPECT_EQ(count_params(c).total(), m.num_params());
  ModelConfig plain = c;
  plain.value_embeds = 0;
  expect_same_start(c, plain);
  c.value_embeds = 4;  // more than the blocks
  EXPECT_THROW(GPT(c, 1, 4), Error);
  c.value_embeds = -1;
  EXPECT_THROW(GPT(c, 1, 4), Error);
}

TEST(GPT, GradientCheckEmbeddingSkips) {
  // Mixing weights (0.8, 0.6) (set by the check): both get gradients, and x0's gradient reaches
  // the embedding table through every skip as well as through the first block.
  ModelConfig c = tiny("relu2");
  c.n_layer = 3;
  c.x0_skips = true;
  whole_model_gradcheck(c);
  c = tiny("swiglu");
  c.x0_skips = true;
  c.bigram_buckets = 5;  // x0 includes the bigram rows
  whole_model_gradcheck(c);
}

TEST(GPT, EmbeddingSkipShapeCountAndStart) {
  ModelConfig c = tiny();
  c.n_layer = 3;
  c.x0_skips = true;
  GPT m(c, 2, 8);
  std::vector<std::string> names;
  for (auto& p : m.params())
    if (p.name.ends_with(".x0_mix")) {
      names.push_back(p.name);
      EXPECT_EQ(p.kind, ParamKind::Scalar);
      EXPECT_EQ(p.shape, (std::vector<int64_t>{2}));
    }
  EXPECT_EQ(names, (std::vector<std::string>{"blocks.1.x0_mix", "blocks.2.x0_mix"}));  // none before block 0
  EXPECT_EQ(count_params(c).total(), m.num_params());
  ModelConfig plain = c;
  plain.x0_skips = false;
  expect_same_start(c, plain);
}

TEST(GPT, GradientCheckTokenSmearing) {
  // lam, the gate weights and both table rows of each position (its own and its predecessor's)
  // get gradients; with a bigram table and embedding skips on top.
  ModelConfig c = tiny("relu2");
  c.smear = true;
  whole_model_gradcheck(c);
  c = tiny("swiglu");
  c.smear = true;
  c.bigram_buckets = 5;
  c.x0_skips = true;
  whole_model_gradcheck(c);
}

TEST(GPT, TokenSmearingShapeCountAndStart) {
  ModelConfig c = tiny();
  c.smear = true;
  GPT m(c, 2, 8);
  int found = 0;
  for (auto& p : m.params())
    if (p.name == "smear") {
      ++found;
      EXPECT_EQ(p.kind, ParamKind::Scalar);
      EXPECT_EQ(p.shape, (std::vector<int64_t>{1 + c.smear_gate_width()}));
    }
  EXPECT_EQ(found, 1);
  EXPECT_EQ(count_params(c).total(), m.num_params());
  ModelConfig plain = c;
  plain.smear = false;
  expect_same_start(c, plain);  // lam starts at zero and the other tensors initialise as without it
}

TEST(GPT, GradientCheckMultiTokenHead) {
  // The head's and the trunk's gradients get both losses; mtp_proj gets the second one's.
  ModelConfig c = tiny("relu2");
  c.mtp_weight = 0.5f;
  whole_model_gradcheck(c);
  c = tiny("swiglu");  // tied: the embedding table is the head of both losses
  c.tie_embeddings = true;
  c.norm_gain = true;
  c.mtp_weight = 1.0f;
  whole_model_gradcheck(c);
}

// The multi-token head is one more matrix and a second pass of the head, in training only: the
// next-token loss is that of the model without it (the same initial weights), with or without
// gradients; its own loss is that of a separate, direct computation; evaluation skips it.
TEST(GPT, MultiTokenHeadLossShapeAndCount) {
  ModelConfig c = tiny();
  c.zero_init_out = false;
  c.mtp_weight = 0.3f;
  ModelConfig plain = c;
  plain.mtp_weight = 0.0f;
  const int B = 2, T = 8;
  GPT m(c, B, T), p(plain, B, T);
  const Param* proj = nullptr;
  for (auto& q : m.params())
    if (q.name == "mtp_proj") proj = &q;
  ASSERT_NE(proj, nullptr);
  EXPECT_EQ(proj->kind, ParamKind::Matrix);  // trained by Muon with the other matrices
  EXPECT_EQ(proj->shape, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(m.params().back().name, "mtp_proj");
  EXPECT_EQ(count_params(c).total(), m.num_params());
  EXPECT_DOUBLE_EQ(flops_per_token(c, 16), m.flops_per_token(16));
  EXPECT_DOUBLE_EQ(m.flops_per_token(16) - p.flops_per_token(16), 3.0 * 2.0 * (64 * 32 + 32 * 32));
  m.set_matmul_precision(MatPrec::F32);
  p.set_matmul_precision(MatPrec::F32);
  m.init_weights(9);
  p.init_weights(9);
  auto in = tokens(B * T, 37, 3), tg = tokens(B * T, 37, 4);
  tg[5] = -1;  // ignored by both heads: position 5's next token, position 4's token after next
  const float lp = p.forward(in.data(), tg.data(), B, T);
  EXPECT_TRUE(p.aux_losses().empty());  // no multi-token head: no auxiliary loss at all
  const float lm = m.forward(in.data(), tg.data(), B, T);
  ASSERT_EQ(m.aux_losses().size(), 1u);
  EXPECT_EQ(m.aux_losses()[0].first, "mtp_loss");
  EXPECT_EQ(lm, lp);
  EXPECT_GT(mtp_loss_of(m), 0.0f);
  // With mtp_proj = I the multi-token head scores position t with the next-token logits of t
  // (an RMSNorm of an RMSNorm output changes it by eps only), so its loss is the next-token loss
  // of the model without it against the targets moved one position on, within each row.
  std::vector<float> eye(32 * 32, 0.0f);
  for (int i = 0; i < 32; ++i) eye[size_t(i) * 33] = 1.0f;
  for (auto& q : m.params())
    if (q.name == "mtp_proj") q.from_host(eye.data());
  m.weights_changed();
  EXPECT_EQ(m.forward(in.data(), tg.data(), B, T), lp);
  std::vector<int32_t> after_next(B * T, -1);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t + 1 < T; ++t) after_next[b * T + t] = tg[b * T + t + 1];
  EXPECT_NEAR(mtp_loss_of(m), p.forward(in.data(), after_next.data(), B, T), 1e-4);
  m.set_grad_enabled(false);
  EXPECT_EQ(m.forward(in.data(), tg.data(), B, T), lp);
  EXPECT_EQ(mtp_loss_of(m), 0.0f);  // evaluation: no multi-token head
  c.mtp_weight = -1.0f;
  EXPECT_THROW(GPT(c, 1, 4), Error);
}

TEST(GPT, BigramEmbeddingShapeCountAndStart) {
  ModelConfig c = tiny();
  c.bigram_buckets = 50;
  GPT m(c, 2, 8);
  const Param* big = nullptr;
  for (auto& p : m.params())
    if (p.name == "bigram_embed") big = &p;
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->kind, ParamKind::Embedding);  // trained with the embeddings' optimizer group
  EXPECT_EQ(big->shape, (std::vector<int64_t>{50, 32}));
  EXPECT_EQ(count_params(c).total(), m.num_params());
  ModelConfig plain = c;
  plain.bigram_buckets = 0;
  expect_same_start(c, plain);
  c.bigram_buckets = 1;
  EXPECT_THROW(GPT(c, 1, 4), Error);
}

TEST(GPT, Bf16MatchesFp32AndIsDeterministic) {
  ModelConfig c = tiny();
  c.zero_init_out = false;
  c.init_std = 0.1f;
  int B = 2, T = 16;
  auto in = tokens(B * T, 37, 21), tg = tokens(B * T, 37, 22);
  GPT a(c, B, T), b(c, B, T), f(c, B, T);
  a.init_weights(9);
  b.init_weights(9);
  f.init_weights(9);
  f.set_matmul_precision(MatPrec::F32);
  for (GPT* m : {&a, &b, &f}) m->zero_grad();
  float la = a.forward(in.data(), tg.data(), B, T);
  float lb = b.forward(in.data(), tg.data(), B, T);
  float lf = f.forward(in.data(), tg.data(), B, T);
  EXPECT_EQ(std::memcmp(&la, &lb, 4), 0);  // same seed -> same bits
  EXPECT_NEAR(la, lf, 0.01 * lf);
  a.backward();
  b.backward();
  f.backward();
  for (size_t i = 0; i < a.params().size(); ++i) {
    const Param& pa = a.params()[i];
    EXPECT_EQ(std::memcmp(pa.grad, b.params()[i].grad, 4 * pa.numel()), 0) << pa.name;
    double num = 0, den = 0;
    for (int64_t j = 0; j < pa.numel(); ++j) {
      double g = f.params()[i].grad[j];
      num += (pa.grad[j] - g) * (pa.grad[j] - g);
      den += g * g;
    }
    EXPECT_LT(std::sqrt(num), 0.05 * std::sqrt(den) + 1e-7) << pa.name;  // bf16 noise
  }
}

TEST(GPT, BackwardAccumulatesScaled) {
  ModelConfig c = tiny();
  c.zero_init_out = false;
  int B = 1, T = 8;
  auto in = tokens(B * T, 37, 31), tg = tokens(B * T, 37, 32);
  GPT m(c, B, T);
  m.init_weights(2);
  m.zero_grad();
  m.forward(in.data(), tg.data(), B, T);
  m.backward(1.0f);
  std::vector<float> g1(m.params()[1].grad, m.params()[1].grad + m.params()[1].numel());
  m.zero_grad();
  for (int i = 0; i < 2; ++i) {
    m.forward(in.data(), tg.data(), B, T);
    m.backward(0.5f);
  }
  for (size_t j = 0; j < g1.size(); ++j) EXPECT_NEAR(m.params()[1].grad[j], g1[j], 1e-6 + 1e-4 * std::abs(g1[j]));
  EXPECT_THROW(m.backward(), Error);  // no forward since the last backward
}

TEST(GPT, TokenLossArgmaxAndLastLogits) {
  ModelConfig c = tiny();
  c.zero_init_out = false;
  c.init_std = 0.2f;
  int B = 2, T = 9;
  auto in = tokens(B * T, 37, 41), tg = tokens(B * T, 37, 42);
  GPT m(c, B, T);
  m.init_weights(4);
  std::vector<float> tl(B * T);
  std::vector<int32_t> am(B * T);
  float mean = m.forward(in.data(), tg.data(), B, T, tl.data(), am.data());
  double s = 0;
  for (float v : tl) s += v;
  EXPECT_NEAR(mean, s / (B * T), 1e-5);
  std::vector<float> lg(B * 64);
  m.last_logits(in.data(), B, T, lg.data());
  for (int b = 0; b < B; ++b) {
    int best = 0;
    for (int j = 0; j < 37; ++j)
      if (lg[b * 64 + j] > lg[b * 64 + best]) best = j;
    EXPECT_EQ(best, am[b * T + T - 1]);
    EXPECT_LE(std::abs(lg[b * 64]), c.logit_softcap);
    EXPECT_TRUE(std::isinf(lg[b * 64 + 40]));  // padding
    double mx = -1e30, sum = 0;
    for (int j = 0; j < 37; ++j) mx = std::max(mx, double(lg[b * 64 + j]));
    for (int j = 0; j < 37; ++j) sum += std::exp(lg[b * 64 + j] - mx);
    EXPECT_NEAR(mx + std::log(sum) - lg[b * 64 + tg[b * T + T - 1]], tl[b * T + T - 1], 1e-4);
  }
}

TEST(GPT, FlopsPerToken) {
  ModelConfig c = tiny();
  GPT m(c, 1, 4);
  // 3 * (2 * matmul weights per token + causal attention)
  double mm = 2 * ((32 + 16 + 16) * 32 + 32 * 32 + 64 * 32 + 64 * 32) + 64 * 32;
  double att = 2 * 2.0 * 4 * 8 * (16 + 1);
  EXPECT_DOUBLE_EQ(m.flops_per_token(16), 3 * (2 * mm + att));
}

// Tests for the KV-cache forward and generation: greedy decoding with the cache equals greedy
// decoding by full recomputation token for token; cached scoring equals GPT::forward; seeds.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/kv_decode.h"
#include "eval/sample.h"
#include "model/gpt.h"
#include "backend/cpu/matmul.h"
#include "core/common.h"
#include "test_model_util.h"

using namespace clm;

namespace {

ModelConfig tiny_config(const std::string& act = "relu2", bool gain = false) {
  // grouped-query attention; vocab 100 is padded to 128: padding must never be sampled
  ModelConfig c = model_test::tiny_config({.vocab_size = 100, .seq_len = 48});
  c.activation = act;
  c.norm_gain = gain;
  c.init_std = 0.5f;   // large weights: distinct logits, no near-ties for argmax
  c.zero_init_out = false;
  return c;
}

// Gives the bigram table (model.bigram_buckets), value embeddings (model.value_embeds) and the smear
// weights (model.smear) values:
// init_weights starts them at zero, where a wrong previous token or a missing value row would change
// nothing.
void fill_zero_start_tables(GPT& m, uint64_t seed) {
  for (auto& p : m.params())
    if (p.name == "bigram_embed" || p.name.ends_with(".value_embed")) {
      Rng r(seed);
      std::vector<float> h(size_t(p.numel()));
      for (float& x : h) x = 0.5f * r.normal();
      p.from_host(h.data());
    } else if (p.name.ends_with(".x0_mix")) {  // embedding skips: start (1, 0) would mix nothing in
      const float h[2] = {0.9f, 0.7f};
      p.from_host(h);
    } else if (p.name == "smear") {  // token smearing: lam = 0 would mix nothing in
      Rng r(seed + 1);
      std::vector<float> h(size_t(p.numel()));
      for (size_t i = 0; i < h.size(); ++i) h[i] = i == 0 ? 0.8f : 0.5f * r.normal();
      p.from_host(h.data());
    }
  m.weights_changed();
}

std::vector<int32_t> prompt_of(int n, int V) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; i++) p.push_back((i * 37 + 11) % V);
  return p;
}

}  // namespace

TEST(SampleKV, GreedyWithCacheEqualsRecomputation) {
  for (MatPrec prec : {MatPrec::F32, MatPrec::BF16}) {
    for (const char* act : {"relu2", "swiglu"}) {
      ModelConfig c = tiny_config(act, std::string(act) == "swiglu");
      c.bigram_buckets = std::string(act) == "swiglu" ? 11 : 0;  // each appended token pairs with the last
      c.value_embeds = std::string(act) == "swiglu" ? 0 : 2;
      c.attn_window = std::string(act) == "swiglu" ? 5 : 0;  // decoding past the window
      c.x0_skips = std::string(act) == "relu2";
      c.smear = std::string(act) == "relu2";  // each appended token mixes in the last one's row
      GPT model(c, 1, c.seq_len);
      model.init_weights(3);
      fill_zero_start_tables(model, 4);
      model.set_matmul_precision(prec);
      model.set_grad_enabled(false);
      SampleOptions o;
      o.tokens = 14;
      o.temperature = 0.0f;
      auto p = prompt_of(6, c.vocab_size);
      auto a = generate(model, p, o);
      auto b = generate_nocache(model, p, o);
      ASSERT_EQ(a.size(), 14u);
      EXPECT_EQ(a, b) << "act=" << act << " prec=" << (prec == MatPrec::F32 ? "f32" : "bf16");
      for (int32_t t : a) EXPECT_LT(t, c.vocab_size);
    }
  }
}

TEST(SampleKV, SeededSamplingIsDeterministicAndMatchesRecomputation) {
  ModelConfig c = tiny_config();
  GPT model(c, 1, c.seq_len);
  model.init_weights(5);
  model.set_matmul_precision(MatPrec::F32);
  SampleOptions o;
  o.tokens = 20;
  o.temperature = 0.8f;
  o.top_k = 10;
  o.seed = 11;
  auto p = prompt_of(5, c.vocab_size);
  auto a = generate(model, p, o);
  EXPECT_EQ(a, generate(model, p, o));
  EXPECT_EQ(a, generate_nocache(model, p, o));
  o.seed = 12;
  EXPECT_NE(a, generate(model, p, o));
  o.tokens = 100;  // beyond the context
  EXPECT_THROW(generate(model, p, o), Error);
}

TEST(SampleKV, CachedScoringMatchesForward) {
  for (int bigram : {0, 7}) {
  SCOPED_TRACE(::testing::Message() << "bigram_buckets " << bigram);
  ModelConfig c = tiny_config("gelu", true);
  c.bigram_buckets = bigram;
  c.value_embeds = bigram > 0 ? 1 : 0;
  c.attn_window = bigram > 0 ? 6 : 0;
  c.x0_skips = bigram > 0;
  c.smear = bigram > 0;
  const int B = 3, T = 20;
  GPT model(c, B, T);
  model.init_weights(9);
  fill_zero_start_tables(model, 10);
  model.set_matmul_precision(MatPrec::F32);
  model.set_grad_enabled(false);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int i = 0; i < B * T; i++) {
    in[i] = (i * 13 + 5) % c.vocab_size;
    tg[i] = (i % 4 == 0) ? -1 : (i * 7 + 3) % c.vocab_size;
  }
  std::vector<float> l1(B * T), l2(B * T);
  std::vector<int32_t> a1(B * T), a2(B * T);
  model.forward(in.data(), tg.data(), B, T, l1.data(), a1.data());
  KVDecoder one(model, B, T, /*one_shot=*/true);
  one.append(in.data(), B, T);
  one.score(tg.data(), l2.data(), a2.data());
  EXPECT_THROW(one.append(in.data(), B, 1), Error);
  KVDecoder dec(model, B, T);
  dec.append(in.data(), B, T);
  for (int i = 0; i < B * T; i++) {
    if (tg[i] < 0) continue;
    EXPECT_NEAR(l1[i], l2[i], 1e-4 * std::max(1.0f, std::fabs(l1[i]))) << i;
    EXPECT_EQ(a1[i], a2[i]) << i;
  }
  // Appending in two steps gives the same last logits as one step.
  std::vector<float> z1(c.padded_vocab() * B), z2(c.padded_vocab() * B);
  dec.last_logits(z1.data());
  std::vector<int32_t> first, second;
  for (int b = 0; b < B; b++) {
    first.insert(first.end(), in.begin() + b * T, in.begin() + b * T + 12);
    second.insert(second.end(), in.begin() + b * T + 12, in.begin() + (b + 1) * T);
  }
  dec.reset();
  dec.append(first.data(), B, 12);
  dec.append(second.data(), B, T - 12);
  dec.last_logits(z2.data());
  for (int i = 0; i < c.vocab_size; i++) EXPECT_NEAR(z1[i], z2[i], 1e-4);
  EXPECT_TRUE(std::isinf(z2[c.vocab_size]) && z2[c.vocab_size] < 0);
  }
}

// Rows that share a prefix, scored as groups (prefix once, branches attending to it), give what
// each whole row gets from append() + score(): several groups packed into one call, branches of
// different lengths, a group without a prefix, GQA, qk-norm and both matmul precisions.
TEST(SampleKV, GroupScoringEqualsWholeRows) {
  for (MatPrec prec : {MatPrec::F32, MatPrec::BF16}) {
    ModelConfig c = tiny_config("swiglu", true);
    c.qk_norm = true;
    c.bigram_buckets = prec == MatPrec::F32 ? 13 : 0;  // a branch's first token pairs with the prefix's last
    c.value_embeds = prec == MatPrec::F32 ? 1 : 2;
    c.x0_skips = prec == MatPrec::BF16;
    c.smear = true;  // a branch's first token mixes in the prefix's last
    GPT model(c, 1, c.seq_len);
    model.init_weights(21);
    fill_zero_start_tables(model, 22);
    model.set_matmul_precision(prec);
    model.set_grad_enabled(false);
    struct G { int prefix; std::vector<int> branches; };
    std::vector<G> spec = {{20, {3, 7, 1, 5}}, {0, {9}}, {33, {2, 2}}, {5, {40}}};
    std::vector<PrefixGroup> groups;
    std::vector<int32_t> packed, targets;
    std::vector<std::vector<int32_t>> rows;  // the whole rows, for the reference
    std::vector<std::vector<size_t>> where;  // packed index of each row position
    int seed = 1;
    for (const G& g : spec) {
      std::vector<int32_t> prefix;
      for (int i = 0; i < g.prefix; i++) prefix.push_back((seed++ * 29 + 7) % c.vocab_size);
      groups.push_back({g.prefix, g.branches});
      size_t p0 = packed.size();
      packed.insert(packed.end(), prefix.begin(), prefix.end());
      targets.insert(targets.end(), prefix.size(), -1);
      for (int n : g.branches) {
        std::vector<int32_t> row = prefix;
        std::vector<size_t> idx;
        for (int i = 0; i < g.prefix; i++) idx.push_back(p0 + i);
        for (int i = 0; i < n; i++) {
          row.push_back((seed++ * 53 + 3) % c.vocab_size);
          idx.push_back(packed.size());
          packed.push_back(row.back());
          targets.push_back((seed * 17 + i) % c.vocab_size);  // every branch position scored
        }
        rows.push_back(row);
        where.push_back(idx);
      }
    }
    KVDecoder dec(model, 1, c.seq_len, /*one_shot=*/true);
    std::vector<float> loss(packed.size());
    std::vector<int32_t> am(packed.size());
    dec.score_groups(packed.data(), groups, targets.data(), loss.data(), am.data());
    int checked = 0;
    for (size_t r = 0; r < rows.size(); r++) {
      const int n = (int)rows[r].size();
      std::vector<int32_t> tg(n);
      for (int i = 0; i < n; i++) tg[i] = targets[where[r][i]];
      std::vector<float> l(n);
      std::vector<int32_t> a(n);
      dec.reset();
      dec.append(rows[r].data(), 1, n);
      dec.score(tg.data(), l.data(), a.data());
      for (int i = 0; i < n; i++) {
        size_t k = where[r][i];
        if (tg[i] < 0) {
          EXPECT_EQ(am[k], -1);
          continue;
        }
        EXPECT_NEAR(loss[k], l[i], 2e-4 * std::max(1.0f, std::fabs(l[i]))) << "row " << r << " pos " << i;
        EXPECT_EQ(am[k], a[i]) << "row " << r << " pos " << i;
        checked++;
      }
    }
    EXPECT_EQ(checked, 3 + 7 + 1 + 5 + 9 + 2 + 2 + 40);
    // Too long for the context, or an empty branch: refused.
    std::vector<PrefixGroup> bad = {{40, {9}}};
    EXPECT_THROW(dec.score_groups(packed.data(), bad, targets.data(), loss.data(), am.data()), Error);
    bad = {{4, {0}}};
    EXPECT_THROW(dec.score_groups(packed.data(), bad, targets.data(), loss.data(), am.data()), Error);
  }
}

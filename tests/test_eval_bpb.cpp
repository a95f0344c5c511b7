// Tests for bits per byte: the definition (nats / (ln2 * bytes)), exclusion of special-token
// targets, exact counting of val_tokens target positions, and hand-computed cases.
#include <gtest/gtest.h>

#include <cmath>

#include "core/common.h"
#include "eval/bpb.h"

using namespace clm;

namespace {

// A toy vocabulary: id 0 is BOS (0 bytes), id i > 0 has i bytes... capped at 4.
std::vector<uint32_t> toy_bytes(int V) {
  std::vector<uint32_t> b(V);
  for (int i = 1; i < V; i++) b[i] = 1 + (i % 4);
  return b;
}

// Yields batches from a fixed token stream, rows of T+1 tokens overlapping by one like the loader.
BpbBatchSource stream_source(std::vector<int32_t> stream, int B, int T) {
  auto pos = std::make_shared<size_t>(0);
  return [stream, B, T, pos](int32_t* in, int32_t* tg) {
    if (*pos + (size_t)B * T + 1 > stream.size()) return false;
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++) {
        in[b * T + t] = stream[*pos + b * T + t];
        tg[b * T + t] = stream[*pos + b * T + t + 1];
      }
    *pos += (size_t)B * T;
    return true;
  };
}

std::vector<int32_t> toy_stream(int n, int V) {
  std::vector<int32_t> s;
  Rng rng(7);
  for (int i = 0; i < n; i++) s.push_back(i % 13 == 0 ? 0 : 1 + (int32_t)(rng.next() % (V - 1)));
  return s;
}

}  // namespace

TEST(EvalBpb, UniformLogitsGiveLog2VTimesTokensOverBytes) {
  const int V = 50, B = 2, T = 8;
  auto bytes = toy_bytes(V);
  auto stream = toy_stream(400, V);
  float lnV = (float)std::log((double)V);
  int calls = 0;
  BpbScorer uniform = [&](const int32_t*, const int32_t* tg, int b, int t, float* loss) {
    calls++;
    for (int i = 0; i < b * t; i++) loss[i] = tg[i] >= 0 ? lnV : 0.0f;
  };
  BpbResult r = eval_bpb(stream_source(stream, B, T), uniform, bytes, 100, B, T);
  EXPECT_EQ(r.positions, 100);
  // Count the expected tokens/bytes directly from the stream: targets are stream[1..100].
  int64_t tokens = 0, nbytes = 0;
  for (int i = 1; i <= 100; i++)
    if (stream[i] != 0) { tokens++; nbytes += bytes[stream[i]]; }
  EXPECT_EQ(r.tokens, tokens);
  EXPECT_EQ(r.bytes, nbytes);
  EXPECT_LT(r.tokens, 100);  // some BOS targets were skipped
  EXPECT_NEAR(r.bpb, (double)lnV * tokens / (std::log(2.0) * nbytes), 1e-12);
  EXPECT_NEAR(r.bpb, std::log2((double)V) * tokens / nbytes, 1e-6);
  EXPECT_EQ(calls, 7);  // 6 full batches of 16 positions + one batch with a single scored row
}

TEST(EvalBpb, SpecialTargetsAreExcludedFromBothSums) {
  std::vector<uint32_t> bytes = {0, 1, 3};  // id 0 = BOS
  int32_t targets[6] = {1, 0, 2, -1, 0, 2};
  float loss[6] = {1.0f, 100.0f, 2.0f, 50.0f, 100.0f, 0.5f};
  BpbResult r;
  bpb_accumulate(r, targets, loss, 6, bytes);
  EXPECT_EQ(r.positions, 5);  // -1 is not a position
  EXPECT_EQ(r.tokens, 3);
  EXPECT_EQ(r.bytes, 1 + 3 + 3);
  EXPECT_DOUBLE_EQ(r.nats, 3.5);
  bpb_finalize(r);
  EXPECT_DOUBLE_EQ(r.bpb, 3.5 / (std::log(2.0) * 7));
  BpbResult empty;
  EXPECT_THROW(bpb_finalize(empty), Error);
  int32_t bad[1] = {9};
  EXPECT_THROW(bpb_accumulate(r, bad, loss, 1, bytes), Error);
  float nan[1] = {NAN};
  int32_t one[1] = {1};
  EXPECT_THROW(bpb_accumulate(r, one, nan, 1, bytes), Error);
}

// A bigram "model" with known logits: the loss is computed by the scorer from the logits table, the
// expected bpb by hand from softmax probabilities.
TEST(EvalBpb, HandBuiltBigramLogits) {
  // Vocabulary {BOS, 'a' (1 byte), 'bc' (2 bytes)}; logits[prev][next].
  const double L[3][3] = {{0.0, 1.0, 2.0}, {0.5, -1.0, 1.0}, {0.0, 0.0, 3.0}};
  std::vector<uint32_t> bytes = {0, 1, 2};
  auto ce = [&](int prev, int next) {
    double z = 0;
    for (int j = 0; j < 3; j++) z += std::exp(L[prev][j]);
    return std::log(z) - L[prev][next];
  };
  // Stream: BOS a bc bc BOS a a, one row of T=6.
  std::vector<int32_t> stream = {0, 1, 2, 2, 0, 1, 1};
  BpbScorer bigram = [&](const int32_t* in, const int32_t* tg, int B, int T, float* loss) {
    for (int i = 0; i < B * T; i++) loss[i] = tg[i] >= 0 ? (float)ce(in[i], tg[i]) : 0.0f;
  };
  BpbResult r = eval_bpb(stream_source(stream, 1, 6), bigram, bytes, 6, 1, 6);
  double nats = ce(0, 1) + ce(1, 2) + ce(2, 2) + ce(0, 1) + ce(1, 1);  // BOS target (bc->BOS) skipped
  EXPECT_EQ(r.tokens, 5);
  EXPECT_EQ(r.bytes, 1 + 2 + 2 + 1 + 1);
  EXPECT_NEAR(r.bpb, nats / (std::log(2.0) * 7), 1e-6);
  // Only the first 3 positions: a bc bc.
  BpbResult r3 = eval_bpb(stream_source(stream, 1, 6), bigram, bytes, 3, 1, 6);
  EXPECT_EQ(r3.positions, 3);
  EXPECT_EQ(r3.bytes, 5);
  EXPECT_NEAR(r3.bpb, (ce(0, 1) + ce(1, 2) + ce(2, 2)) / (std::log(2.0) * 5), 1e-6);
}

TEST(EvalBpb, JsonCarriesDefinitionAndCounts) {
  BpbResult r;
  r.bpb = 1.25;
  r.tokens = 10;
  r.bytes = 42;
  r.positions = 11;
  r.val_tokens = 11;
  auto j = r.to_json();
  EXPECT_EQ(j["bpb"], 1.25);
  EXPECT_EQ(j["tokens"], 10);
  EXPECT_EQ(j["bytes"], 42);
  EXPECT_EQ(j["val_tokens"], 11);
  EXPECT_NE(j["definition"].get<std::string>().find("ln 2"), std::string::npos);
}

TEST(EvalBpb, ShortSplitWarnsAndCountsWhatExists) {
  std::vector<uint32_t> bytes = toy_bytes(10);
  auto stream = toy_stream(33, 10);
  BpbScorer one = [](const int32_t*, const int32_t* tg, int B, int T, float* loss) {
    for (int i = 0; i < B * T; i++) loss[i] = 1.0f;
  };
  BpbResult r = eval_bpb(stream_source(stream, 2, 8), one, bytes, 1000, 2, 8);
  EXPECT_EQ(r.positions, 32);
  EXPECT_THROW(eval_bpb(stream_source(stream, 2, 8), one, bytes, 0, 2, 8), Error);
}

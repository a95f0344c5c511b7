// The ONNX export (src/export/onnx.h) against independent tools: python3-onnx's checker accepts the
// file, and ONNX Runtime (onnxruntime-node) computes clocklm's logits within 1e-4 for a default
// model and for models with every optional architecture feature, on rows of several lengths
// (longer than the sliding window), batched and not, and its greedy continuation of a prompt is
// clocklm's (the KV-cache generator `sample` uses), also through the generation variant that takes
// and returns keys and values. Also the protobuf encoder's wire bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "backend/backend.h"
#include "core/common.h"
#include "eval/sample.h"
#include "export/onnx.h"
#include "export/protobuf_writer.h"
#include "model/gpt.h"
#include "test_onnx_util.h"
#include "test_model_util.h"

using namespace clm;
namespace fs = std::filesystem;

namespace {

ModelConfig small_config() {
  // vocab 300 is padded to 320: the padding rows are not exported
  ModelConfig c = model_test::tiny_config({.n_kv_head = 4, .vocab_size = 300, .seq_len = 64});
  c.zero_init_out = false;
  c.matmul_precision = "fp32";
  return c;
}

// Every option on: GQA, value embeddings, bigram table, window, embedding skips, token smearing,
// swiglu, gains (q/k norm gains included), tied embeddings, no softcap, a multi-token head.
ModelConfig all_options_config() {
  ModelConfig c = small_config();
  c.n_layer = 3;
  c.n_kv_head = 2;
  c.value_embeds = 2;
  c.bigram_buckets = 61;
  c.attn_window = 5;
  c.x0_skips = true;
  c.smear = true;
  c.activation = "swiglu";
  c.norm_gain = true;
  c.tie_embeddings = true;
  c.logit_softcap = 0;
  c.mtp_weight = 0.5f;  // the multi-token head is training-only: not exported
  return c;
}

// The other variants: gelu, multi-query attention, no qk-norm (norm gains elsewhere), a larger
// softcap, another RoPE base and window.
ModelConfig gelu_config() {
  ModelConfig c = small_config();
  c.activation = "gelu";
  c.n_kv_head = 1;
  c.qk_norm = false;
  c.norm_gain = true;
  c.attn_window = 3;
  c.logit_softcap = 30;
  c.rope_base = 500;
  c.bigram_buckets = 2;
  c.x0_skips = true;
  c.smear = true;
  c.value_embeds = 1;
  c.norm_eps = 1e-5f;
  return c;
}

// Random weights well away from the initial ones: gains and skip weights perturbed from (1, 0),
// the zero-initialised tables filled.
void randomize(GPT& m, uint64_t seed) {
  Rng rng(seed);
  for (Param& p : m.params()) {
    std::vector<float> h(size_t(p.numel()));
    for (float& v : h) {
      if (p.name.ends_with("x0_mix")) v = 0.6f + 0.3f * rng.normal();
      else if (p.kind == ParamKind::Scalar) v = 1.0f + 0.3f * rng.normal();
      else if (p.kind == ParamKind::Embedding) v = 0.5f * rng.normal();
      else v = 0.12f * rng.normal();
    }
    p.from_host(h.data());
  }
  m.weights_changed();
}

// clocklm's logits (fp32 matmuls, the KV-cache forward) of equal-length rows: [B x T x V].
std::vector<float> clocklm_logits(GPT& m, const std::vector<std::vector<int32_t>>& rows) {
  const ModelConfig& c = m.config();
  const int B = int(rows.size()), T = int(rows[0].size()), V = c.vocab_size, Vp = c.padded_vocab();
  const int64_t area = int64_t(c.n_kv_head) * T * c.head_dim;
  KVCache cache(m.backend(), c.n_layer, area * B, false);
  std::vector<int32_t> tok;
  std::vector<KVSegment> segs;
  for (int b = 0; b < B; ++b) {
    tok.insert(tok.end(), rows[size_t(b)].begin(), rows[size_t(b)].end());
    KVSegment s;
    s.off = int64_t(b) * T;
    s.n = T;
    s.cache = area * b;
    s.ldT = T;
    segs.push_back(s);
  }
  const int64_t N = int64_t(B) * T;
  m.forward_cached(tok.data(), N, segs, cache, T);
  std::vector<int64_t> idx(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) idx[size_t(i)] = i;
  std::vector<float> full(size_t(N * Vp)), out(size_t(N * V));
  m.cached_logits(cache, idx.data(), N, full.data());
  for (int64_t i = 0; i < N; ++i)
    for (int j = 0; j < V; ++j) out[size_t(i * V + j)] = full[size_t(i * Vp + j)];
  return out;
}

std::vector<std::vector<int32_t>> random_rows(int B, int T, int V, Rng& rng) {
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(B), std::vector<int32_t>(static_cast<size_t>(T)));
  for (auto& r : rows)
    for (auto& t : r) t = int32_t(rng.next() % uint64_t(V));
  // repeated pairs, so the bigram rows repeat too
  if (T >= 6) rows[0][4] = rows[0][0], rows[0][5] = rows[0][1];
  return rows;
}

struct Exported {
  fs::path dir;
  std::string model, with_past;  // model.onnx and the generation variant
  GPT gpt;
};

Exported export_random(const ModelConfig& c, const std::string& tag, uint64_t seed) {
  fs::path dir = fs::temp_directory_path() / ("clocklm_test_onnx_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  Exported e{dir, (dir / "model.onnx").string(), (dir / "model_with_past.onnx").string(),
             GPT(c, 1, c.seq_len, cpu_backend())};
  e.gpt.set_matmul_precision(MatPrec::F32);
  e.gpt.set_grad_enabled(false);
  randomize(e.gpt, seed);
  write_onnx(e.gpt, e.model);
  write_onnx(e.gpt, e.with_past, 0, true);
  return e;
}

void check_with_onnx_checker(const ModelConfig& c, const std::string& tag) {
  const std::string py = onnx_test::python_with_onnx();
  if (py.empty()) GTEST_SKIP() << "python3-onnx is not installed (apt-get install python3-onnx)";
  Exported e = export_random(c, tag, 3);
  for (const std::string& f : {e.model, e.with_past}) {
    auto r = onnx_test::onnx_check(py, f);
    EXPECT_EQ(r.status, 0) << f << ": " << r.out;
    EXPECT_NE(r.out.find("onnx checker: ok"), std::string::npos) << f << ": " << r.out;
  }
  fs::remove_all(e.dir);
}

void check_against_onnxruntime(const ModelConfig& c, const std::string& tag) {
  const std::string why = onnx_test::onnxruntime_missing();
  if (!why.empty()) GTEST_SKIP() << why;
  Exported e = export_random(c, tag, 11);
  Rng rng(5);
  // one-token, short, past-the-window rows one at a time, and a batch of two rows
  std::vector<std::vector<std::vector<int32_t>>> batches = {random_rows(1, 1, c.vocab_size, rng),
                                                            random_rows(1, 7, c.vocab_size, rng),
                                                            random_rows(1, 23, c.vocab_size, rng),
                                                            random_rows(2, 12, c.vocab_size, rng)};
  const std::vector<int32_t> prompt = random_rows(1, 5, c.vocab_size, rng)[0];
  const int n = 20;
  onnx_test::OrtResult ort =
      onnx_test::run_onnxruntime(e.model, batches, prompt, n, {e.with_past, c.n_kv_head, c.head_dim});
  ASSERT_EQ(ort.logits.size(), batches.size());
  // greedy decoding: ONNX Runtime on the whole prefix, and token by token with its key/value
  // outputs fed back, against clocklm's KV-cache generator
  SampleOptions greedy;
  greedy.tokens = n;
  greedy.temperature = 0;
  const std::vector<int32_t> want = generate(e.gpt, prompt, greedy, 0);
  EXPECT_EQ(ort.greedy, want) << tag;
  EXPECT_EQ(ort.incremental, want) << tag << " (generation variant)";
  // each step's logits against clocklm's at that position of the whole sequence
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), want.begin(), want.end() - 1);
  const std::vector<float> ref = clocklm_logits(e.gpt, {seq});
  const size_t V = size_t(c.vocab_size), first = prompt.size() - 1;
  ASSERT_EQ(ort.incremental_logits.size(), size_t(n) * V);
  double worst = 0;
  for (size_t i = 0; i < ort.incremental_logits.size(); ++i)
    worst = std::max(worst, double(std::fabs(ort.incremental_logits[i] - ref[first * V + i])));
  std::printf("%s, generation variant, %d steps: largest |ONNX Runtime - clocklm| %.3g\n", tag.c_str(), n, worst);
  EXPECT_LE(worst, 1e-4) << tag << " (generation variant)";
  std::string ids;
  for (int32_t t : ort.greedy) ids += " " + std::to_string(t);
  std::printf("%s, greedy continuation in ONNX Runtime:%s\n", tag.c_str(), ids.c_str());
  for (size_t b = 0; b < batches.size(); ++b) {
    const int B = int(batches[b].size()), T = int(batches[b][0].size());
    ASSERT_EQ(ort.dims[b], (std::vector<int64_t>{B, T, c.vocab_size}));
    std::vector<float> ref = clocklm_logits(e.gpt, batches[b]);
    ASSERT_EQ(ort.logits[b].size(), ref.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, double(std::fabs(ref[i] - ort.logits[b][i])));
      scale = std::max(scale, double(std::fabs(ref[i])));
    }
    std::printf("%s, rows %dx%d: largest |ONNX Runtime - clocklm| %.3g, largest |logit| %.3g\n", tag.c_str(), B, T,
                worst, scale);
    EXPECT_LE(worst, 1e-4) << tag << " batch " << b << " (" << B << "x" << T << "): largest |logit| " << scale;
    EXPECT_GT(scale, 0.5) << "logits this flat exercise little";
  }
  fs::remove_all(e.dir);
}

}  // namespace

TEST(ProtoWriter, WireBytes) {
  ProtoWriter w;
  w.varint_field(1, 300);  // tag 0x08, varint ac 02
  w.int_field(2, -1);      // ten bytes of two's complement
  w.float_field(3, 1.0f);  // tag 0x1d, 00 00 80 3f
  w.bytes_field(4, "hi");  // tag 0x22, length 2
  const std::string want("\x08\xac\x02"
                         "\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"
                         "\x1d\x00\x00\x80\x3f"
                         "\x22\x02hi",
                         23);
  EXPECT_EQ(w.bytes(), want);
}

TEST(OnnxExport, CheckerAcceptsDefaultModel) { check_with_onnx_checker(small_config(), "check_default"); }
TEST(OnnxExport, CheckerAcceptsEveryOption) { check_with_onnx_checker(all_options_config(), "check_all"); }
TEST(OnnxExport, CheckerAcceptsGeluVariant) { check_with_onnx_checker(gelu_config(), "check_gelu"); }

TEST(OnnxExport, RuntimeMatchesDefaultModel) { check_against_onnxruntime(small_config(), "ort_default"); }
TEST(OnnxExport, RuntimeMatchesEveryOption) { check_against_onnxruntime(all_options_config(), "ort_all"); }
TEST(OnnxExport, RuntimeMatchesGeluVariant) { check_against_onnxruntime(gelu_config(), "ort_gelu"); }

TEST(OnnxExport, RefusesMoreThanOneFileHolds) {
  // RoPE tables for 600M positions would take ~38 GB: refused before anything is built
  ModelConfig c = small_config();
  GPT m(c, 1, 8, cpu_backend());
  std::vector<SafeTensor> params;
  for (const Param& p : m.params()) params.push_back({p.name, p.shape, std::vector<float>(size_t(p.numel()))});
  try {
    onnx_model_bytes(c, params, 600'000'000);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 2 GB"), std::string::npos) << e.what();
  }
  params.pop_back();  // a parameter missing: one line naming it
  try {
    onnx_model_bytes(c, params);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head"), std::string::npos) << e.what();
  }
}

// The ONNX graph of a GPT (see onnx.h): the forward of model/gpt.cpp written as ONNX ops, with the
// weights as fp32 initializers. Linear weights are stored transposed ([in, out], so each layer is
// one MatMul), embeddings and the head without the padded vocabulary rows. The bigram hash of the
// model (a 64-bit mix of the token pair) is computed on int64 tensors: opset 17 has no bitwise
// operators, so each xor-shift is written with Div/Mod arithmetic on the two's-complement value and
// an xor of two 31-bit numbers through their bits.
#include "export/onnx.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "core/common.h"
#include "export/onnx_builder.h"

namespace clm {

namespace {

constexpr int64_t kOpset = 17;
// protobuf caps a message at 2 GiB; the graph besides the weights takes well under 64 MiB.
constexpr int64_t kMaxWeightBytes = (int64_t(1) << 31) - (int64_t(64) << 20);

using A = OnnxAttr;

class GptGraph {
 public:
  GptGraph(const ModelConfig& c, const std::vector<SafeTensor>& params, int max_positions, bool with_past)
      : c_(c), P_(max_positions), past_(with_past) {
    for (const SafeTensor& p : params) w_[p.name] = &p;
    V_ = c_.vocab_size;
    hd_ = c_.head_dim;
  }

  std::string build() {
    ids_ = "input_ids";
    g_.input(ids_, OnnxType::Int64, {{0, "batch"}, {0, "seq"}});
    const std::string shape = g_.op("Shape", {ids_});
    T_ = g_.op("Gather", {shape, g_.i64(1)});
    if (past_) past_inputs();
    else past_len_ = g_.i64(0);
    total_ = past_ ? g_.op("Add", {past_len_, T_}) : T_;
    pos_ = g_.op("Range", {past_len_, total_, g_.i64(1)});  // absolute positions of the new tokens
    key_pos_ = past_ ? g_.op("Range", {g_.i64(0), total_, g_.i64(1)}) : pos_;
    rope_tables();
    causal_mask();
    std::string x = embed();
    const std::string x0 = x;
    for (int l = 0; l < c_.n_layer; ++l) x = block(l, x, x0);
    x = rmsnorm(x, "final_norm.gain");
    std::string z = head(x);
    if (c_.logit_softcap > 0)  // c tanh(z / c), as the model's softcap
      z = g_.op("Mul", {g_.op("Tanh", {g_.op("Mul", {z, g_.f32(1.0f / c_.logit_softcap)})}), g_.f32(c_.logit_softcap)},
                {}, "logits");
    else
      z = g_.op("Identity", {z}, {}, "logits");
    g_.output(z, OnnxType::Float, {{0, "batch"}, {0, "seq"}, {V_, ""}});
    for (const auto& [k, v] : presents_) {
      g_.output(k, OnnxType::Float, {{0, "batch"}, {c_.n_kv_head, ""}, {0, "total"}, {hd_, ""}});
      g_.output(v, OnnxType::Float, {{0, "batch"}, {c_.n_kv_head, ""}, {0, "total"}, {hd_, ""}});
    }
    return g_.model("clocklm_gpt", kOpset, "clocklm",
                    fmt::format("clocklm GPT: input_ids int64 [batch, seq]{} -> logits float [batch, seq, {}]{}; "
                                "rows of at most {} tokens",
                                past_ ? " + past keys/values" : "", V_, past_ ? " + present keys/values" : "", P_));
  }

 private:
  const SafeTensor& param(const std::string& name) const {
    auto it = w_.find(name);
    if (it == w_.end()) fail("ONNX export: the model has no parameter {}", name);
    const int64_t n = std::accumulate(it->second->shape.begin(), it->second->shape.end(), int64_t(1),
                                      std::multiplies<int64_t>());
    if (n != int64_t(it->second->data.size()))
      fail("ONNX export: parameter {} holds {} values, its shape {}", name, it->second->data.size(), n);
    return *it->second;
  }
  bool has(const std::string& name) const { return w_.count(name) > 0; }
  // The first V rows of a [padded vocab, C] table.
  std::string vocab_rows(const std::string& name) {
    const SafeTensor& p = param(name);
    if (p.shape.size() != 2 || p.shape[0] < V_) fail("ONNX export: {} has fewer than {} vocabulary rows", name, V_);
    return g_.init_f32(name, {V_, p.shape[1]}, p.data.data());
  }
  // A [out, in] matrix stored as [in, out] (optionally only its first `rows` rows), for x W^T.
  std::string transposed(const std::string& name, int64_t rows = -1) {
    const SafeTensor& p = param(name);
    if (p.shape.size() != 2 || p.shape[0] < rows) fail("ONNX export: {} is not a matrix of at least {} rows", name, rows);
    const int64_t out = rows < 0 ? p.shape[0] : rows, in = p.shape[1];
    std::vector<float> t(size_t(out * in));
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) t[size_t(i * out + o)] = p.data[size_t(o * in + i)];
    return g_.init_f32(name, {in, out}, t.data());
  }
  std::string plain(const std::string& name) {
    const SafeTensor& p = param(name);
    return g_.init_f32(name, p.shape, p.data.data());
  }
  std::string linear(const std::string& x, const std::string& name) { return g_.op("MatMul", {x, transposed(name)}); }

  // x / sqrt(mean(x^2) + eps) over the last axis, times the gain when the model has one.
  std::string rmsnorm(const std::string& x, const std::string& gain) {
    const std::string ms = g_.op("ReduceMean", {g_.op("Mul", {x, x})}, {A::make_ints("axes", {-1}), A::make_int("keepdims", 1)});
    const std::string r = g_.op("Reciprocal", {g_.op("Sqrt", {g_.op("Add", {ms, g_.f32(c_.norm_eps)})})});
    std::string y = g_.op("Mul", {x, r});
    if (has(gain)) y = g_.op("Mul", {y, plain(gain)});
    return y;
  }

  // The generation variant's extra inputs: each layer's past keys (after qk-norm and RoPE) and
  // values [batch, Hkv, past, hd], whose length gives the new tokens' first position, and with a
  // bigram table or token smearing the token before input_ids[:, 0] (read only when past > 0).
  void past_inputs() {
    for (int l = 0; l < c_.n_layer; ++l)
      for (const char* kv : {"key", "value"})
        g_.input(fmt::format("past.{}.{}", l, kv), OnnxType::Float, {{0, "batch"}, {c_.n_kv_head, ""}, {0, "past"}, {hd_, ""}});
    if (c_.bigram_buckets > 0 || c_.smear) g_.input("prev_ids", OnnxType::Int64, {{0, "batch"}, {1, ""}});
    past_len_ = g_.op("Gather", {g_.op("Shape", {std::string("past.0.key")}), g_.i64(2)});
  }

  // cos/sin [P, hd/2] as the model computes them, cut to the new tokens' positions at run time.
  void rope_tables() {
    const int h2 = hd_ / 2;
    std::vector<float> cs(size_t(P_) * h2), sn(cs.size());
    cpu_backend().rope_tables(cs.data(), sn.data(), P_, hd_, c_.rope_base);
    const std::string from = g_.op("Unsqueeze", {past_len_, g_.i64s({0})});
    const std::string to = g_.op("Unsqueeze", {total_, g_.i64s({0})});
    cos_ = g_.op("Slice", {g_.init_f32("rope.cos", {P_, h2}, cs.data()), from, to, g_.i64s({0})});
    sin_ = g_.op("Slice", {g_.init_f32("rope.sin", {P_, h2}, sn.data()), from, to, g_.i64s({0})});
  }

  // [T, past + T] bool: the query at position t sees the key at position j when 0 <= t - j
  // (< window, with a sliding window).
  void causal_mask() {
    const std::string q = g_.op("Unsqueeze", {pos_, g_.i64s({1})});
    const std::string k = g_.op("Unsqueeze", {key_pos_, g_.i64s({0})});
    const std::string diff = g_.op("Sub", {q, k});
    mask_ = g_.op("GreaterOrEqual", {diff, g_.i64(0)});
    if (c_.attn_window > 0) mask_ = g_.op("And", {mask_, g_.op("Less", {diff, g_.i64(c_.attn_window)})});
  }

  std::string embed() {
    std::string x = g_.op("Gather", {vocab_rows("wte"), ids_});
    wte_ = "wte";
    if (c_.smear) x = smear(x);
    if (c_.bigram_buckets > 0) x = g_.op("Add", {x, g_.op("Gather", {plain("bigram_embed"), bigram_rows()})});
    return x;
  }

  // The token before each position [batch, seq]: prev_ids before the first one (the first token
  // itself without a past, where position 0 reads none).
  std::string prev_tokens() {
    const std::string first =
        past_ ? std::string("prev_ids") : g_.op("Slice", {ids_, g_.i64s({0}), g_.i64s({1}), g_.i64s({1})});
    const std::string rest = g_.op("Slice", {ids_, g_.i64s({0}), g_.i64s({-1}), g_.i64s({1})});
    return g_.op("Concat", {first, rest}, {A::make_int("axis", 1)});
  }

  // Token smearing (model.smear) of the embedding rows e [batch, seq, d]: e + lam sigmoid(e[:k] g)
  // wte[prev], at positions > 0.
  std::string smear(const std::string& e) {
    const SafeTensor& s = param("smear");
    const int k = c_.smear_gate_width();
    if (s.data.size() != size_t(1 + k)) fail("ONNX export: smear holds {} values, not {}", s.data.size(), 1 + k);
    const std::string g = g_.init_f32("smear.gate", {k, 1}, s.data.data() + 1);
    const std::string first_k = g_.op("Slice", {e, g_.i64s({0}), g_.i64s({k}), g_.i64s({2})});
    const std::string f = g_.op("Mul", {g_.op("Sigmoid", {g_.op("MatMul", {first_k, g})}), g_.f32(s.data[0])});
    const std::string has_prev = g_.op(
        "Unsqueeze", {g_.op("Cast", {g_.op("Greater", {pos_, g_.i64(0)})}, {A::make_int("to", int64_t(OnnxType::Float))}),
                      g_.i64s({1})});
    const std::string p = g_.op("Mul", {g_.op("Gather", {wte_, prev_tokens()}), has_prev});
    return g_.op("Add", {e, g_.op("Mul", {f, p})});
  }

  // ---- the bigram hash (model/gpt.cpp bigram_row) on int64 ----
  // a ^ b for 0 <= a, b < 2^31: bit i of each is (v / 2^i) mod 2.
  std::string xor31(const std::string& a, const std::string& b) {
    std::vector<int64_t> pw(31);
    for (int i = 0; i < 31; ++i) pw[size_t(i)] = int64_t(1) << i;
    const std::string p = g_.i64s(pw), two = g_.i64(2), last = g_.i64s({-1});
    auto bits = [&](const std::string& v) { return g_.op("Mod", {g_.op("Div", {g_.op("Unsqueeze", {v, last}), p}), two}); };
    const std::string x = g_.op("Mod", {g_.op("Add", {bits(a), bits(b)}), two});
    return g_.op("ReduceSum", {g_.op("Mul", {x, p}), last}, {A::make_int("keepdims", 0)});
  }
  // x ^= x >> 33 on the 64-bit pattern of x (logical shift). Mod with fmod = 0 takes the sign of
  // the divisor, so Mod(x, 2^k) is the low k bits of x even for negative x.
  std::string xorshift33(const std::string& x) {
    const std::string p33 = g_.i64(int64_t(1) << 33), p31 = g_.i64(int64_t(1) << 31);
    const std::string floor_div = g_.op("Div", {g_.op("Sub", {x, g_.op("Mod", {x, p33})}), p33});
    const std::string hi = g_.op("Mod", {floor_div, p31});  // (unsigned x) >> 33, < 2^31
    const std::string low = g_.op("Mod", {x, p31});         // bits 0..30, the ones hi reaches
    return g_.op("Add", {g_.op("Sub", {x, low}), xor31(low, hi)});
  }
  // (unsigned x) mod m: x mod m, plus 2^64 mod m when x is negative.
  std::string umod(const std::string& x, uint64_t m) {
    const int64_t wrap = int64_t((std::numeric_limits<uint64_t>::max() % m + 1) % m);
    const std::string neg = g_.op("Cast", {g_.op("Less", {x, g_.i64(0)})}, {A::make_int("to", int64_t(OnnxType::Int64))});
    const std::string mm = g_.i64(int64_t(m));
    return g_.op("Mod", {g_.op("Add", {g_.op("Mod", {x, mm}), g_.op("Mul", {neg, g_.i64(wrap)})}), mm});
  }
  // Row of the bigram table at each position: the hash of (previous token, token), K - 1 at
  // position 0. Int64 Mul wraps around as the model's uint64 multiply does.
  std::string bigram_rows() {
    const int64_t K = c_.bigram_buckets;
    const std::string prev = prev_tokens();
    std::string x = g_.op("Add", {g_.op("Mul", {prev, g_.i64(int64_t(1) << 32)}), ids_});
    x = xorshift33(x);
    x = g_.op("Mul", {x, g_.i64(int64_t(0xff51afd7ed558ccdULL))});
    x = xorshift33(x);
    x = g_.op("Mul", {x, g_.i64(int64_t(0xc4ceb9fe1a85ec53ULL))});
    x = xorshift33(x);
    const std::string r = umod(x, uint64_t(K - 1));
    return g_.op("Where", {g_.op("Equal", {pos_, g_.i64(0)}), g_.i64(K - 1), r});
  }

  // ---- a block ----
  // [B, T, n*hd] -> [B, n, T, hd]
  std::string heads(const std::string& x, int n) {
    return g_.op("Transpose", {g_.op("Reshape", {x, g_.i64s({0, 0, n, hd_})})}, {A::make_ints("perm", {0, 2, 1, 3})});
  }
  // Rotate-half RoPE: (a, b) = (x[:hd/2], x[hd/2:]) -> (a cos - b sin, a sin + b cos).
  std::string rope(const std::string& x) {
    const int h2 = hd_ / 2;
    const std::string ax = g_.i64s({3});
    const std::string a = g_.op("Slice", {x, g_.i64s({0}), g_.i64s({h2}), ax});
    const std::string b = g_.op("Slice", {x, g_.i64s({h2}), g_.i64s({hd_}), ax});
    const std::string lo = g_.op("Sub", {g_.op("Mul", {a, cos_}), g_.op("Mul", {b, sin_})});
    const std::string hi = g_.op("Add", {g_.op("Mul", {a, sin_}), g_.op("Mul", {b, cos_})});
    return g_.op("Concat", {lo, hi}, {A::make_int("axis", 3)});
  }
  // [B, Hkv, T, hd] -> [B, H, T, hd], query head h reading kv head h / (H / Hkv).
  std::string repeat_kv(const std::string& x) {
    const int group = c_.n_head / c_.n_kv_head;
    if (group == 1) return x;
    const std::string u = g_.op("Unsqueeze", {x, g_.i64s({2})});
    const std::string e = g_.op("Expand", {u, g_.i64s({1, 1, group, 1, 1})});
    return g_.op("Reshape", {e, g_.i64s({0, c_.n_head, -1, hd_})});
  }

  std::string attention(int l, const std::string& h) {
    const std::string pre = fmt::format("blocks.{}.attn.", l);
    std::string q = heads(linear(h, pre + "wq"), c_.n_head);
    std::string k = heads(linear(h, pre + "wk"), c_.n_kv_head);
    std::string v = linear(h, pre + "wv");
    if (has(pre + "value_embed")) v = g_.op("Add", {v, g_.op("Gather", {vocab_rows(pre + "value_embed"), ids_})});
    v = heads(v, c_.n_kv_head);
    if (c_.qk_norm) {
      q = rmsnorm(q, pre + "q_norm.gain");
      k = rmsnorm(k, pre + "k_norm.gain");
    }
    q = rope(q);
    k = rope(k);
    if (past_) {  // the cache grows by the new tokens' keys and values
      const std::string present_k = fmt::format("present.{}.key", l), present_v = fmt::format("present.{}.value", l);
      k = g_.op("Concat", {fmt::format("past.{}.key", l), k}, {A::make_int("axis", 2)}, present_k);
      v = g_.op("Concat", {fmt::format("past.{}.value", l), v}, {A::make_int("axis", 2)}, present_v);
      presents_.emplace_back(present_k, present_v);
    }
    k = repeat_kv(k);
    v = repeat_kv(v);
    const std::string qs = g_.op("Mul", {q, g_.f32(1.0f / std::sqrt(float(hd_)))});
    std::string s = g_.op("MatMul", {qs, g_.op("Transpose", {k}, {A::make_ints("perm", {0, 1, 3, 2})})});
    s = g_.op("Where", {mask_, s, g_.f32(-std::numeric_limits<float>::infinity())});
    const std::string p = g_.op("Softmax", {s}, {A::make_int("axis", -1)});
    const std::string o = g_.op("Transpose", {g_.op("MatMul", {p, v})}, {A::make_ints("perm", {0, 2, 1, 3})});
    return linear(g_.op("Reshape", {o, g_.i64s({0, 0, int64_t(c_.n_head) * hd_})}), pre + "wo");
  }

  std::string mlp(int l, const std::string& h) {
    const std::string pre = fmt::format("blocks.{}.mlp.", l);
    const std::string u = linear(h, pre + "w_in");
    std::string a;
    if (c_.activation == "relu2") {
      const std::string r = g_.op("Relu", {u});
      a = g_.op("Mul", {r, r});
    } else if (c_.activation == "gelu") {  // the tanh form: 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3)))
      const std::string cube = g_.op("Mul", {g_.op("Mul", {g_.op("Mul", {u, g_.f32(0.044715f)}), u}), u});
      const std::string t = g_.op("Tanh", {g_.op("Mul", {g_.op("Add", {u, cube}), g_.f32(0.7978845608028654f)})});
      a = g_.op("Mul", {g_.op("Mul", {u, g_.f32(0.5f)}), g_.op("Add", {t, g_.f32(1.0f)})});
    } else if (c_.activation == "swiglu") {  // up * gate * sigmoid(gate)
      const std::string gate = linear(h, pre + "w_gate");
      a = g_.op("Mul", {g_.op("Mul", {u, gate}), g_.op("Sigmoid", {gate})});
    } else {
      fail("ONNX export: unknown activation '{}'", c_.activation);
    }
    return linear(a, pre + "w_out");
  }

  std::string block(int l, std::string x, const std::string& x0) {
    const std::string pre = fmt::format("blocks.{}.", l);
    if (has(pre + "x0_mix")) {  // x <- a x + b x0
      const std::string mix = plain(pre + "x0_mix");
      x = g_.op("Add", {g_.op("Mul", {x, g_.op("Gather", {mix, g_.i64(0)})}),
                        g_.op("Mul", {x0, g_.op("Gather", {mix, g_.i64(1)})})});
    }
    x = g_.op("Add", {x, attention(l, rmsnorm(x, pre + "attn_norm.gain"))});
    return g_.op("Add", {x, mlp(l, rmsnorm(x, pre + "mlp_norm.gain"))});
  }

  std::string head(const std::string& x) {
    if (c_.tie_embeddings)
      return g_.op("MatMul", {x, g_.op("Transpose", {wte_}, {A::make_ints("perm", {1, 0})})});
    return g_.op("MatMul", {x, transposed("lm_head", V_)});
  }

  const ModelConfig& c_;
  int64_t P_, V_ = 0;
  bool past_ = false;
  std::string past_len_, total_, key_pos_;
  std::vector<std::pair<std::string, std::string>> presents_;
  int hd_ = 0;
  std::map<std::string, const SafeTensor*> w_;
  OnnxGraphBuilder g_;
  std::string ids_, T_, pos_, cos_, sin_, mask_, wte_;
};

}  // namespace

std::string onnx_model_bytes(const ModelConfig& c, const std::vector<SafeTensor>& params, int max_positions,
                             bool with_past) {
  const int P = max_positions > 0 ? max_positions : c.seq_len;
  if (P <= 0) fail("ONNX export: the maximum row length must be positive, got {}", P);
  int64_t floats = int64_t(P) * c.head_dim;  // the RoPE tables
  for (const SafeTensor& t : params) floats += int64_t(t.data.size());
  const int64_t bytes = 4 * floats;
  if (bytes > kMaxWeightBytes)
    fail("ONNX export: the weights take {:.2f} GB; one ONNX file holds at most 2 GB (protobuf's limit) "
         "and external weight files are not written",
         double(bytes) / 1e9);
  return GptGraph(c, params, P, with_past).build();
}

void write_onnx(const ModelConfig& cfg, const std::vector<SafeTensor>& params, const std::string& path,
                int max_positions, bool with_past) {
  atomic_write(path, onnx_model_bytes(cfg, params, max_positions, with_past));
}

void write_onnx(GPT& model, const std::string& path, int max_positions, bool with_past) {
  std::vector<SafeTensor> params;
  for (const Param& p : model.params()) {
    SafeTensor t{p.name, p.shape, std::vector<float>(size_t(p.numel()))};
    p.to_host(t.data.data());
    params.push_back(std::move(t));
  }
  write_onnx(model.config(), params, path, max_positions, with_past);
}

}  // namespace clm

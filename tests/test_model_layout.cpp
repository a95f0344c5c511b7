// ModelLayout (model/layout.h) against the numbers the model code gave before it read them from the
// layout: parameter counts, training FLOPs per token, device bytes, parameter buffer size and every
// parameter's name, shape, kind and offset, for the presets and for configs that use each feature
// (GQA/MQA, SwiGLU, GELU, tied and untied heads, norm gains, value embeddings, embedding skips,
// bigram embeddings, multi-token prediction, attention windows). Also: the GPT carves its buffers
// at the layout's offsets, the activation views tile the arena, and config checks live in validate.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/common.h"
#include "model/gpt.h"
#include "model/layout.h"

using namespace clm;

namespace {

// Expected numbers of one config: counts by group, flops_per_token at T = 1, 100 and seq_len, and
// memory bytes for (B, T) = (1, 1), (2, 64) and (8, seq_len).
struct Expect {
  const char* name;
  int64_t embed, head, matrix, scalar;
  double flops[3];
  size_t bytes[3];
};

// Presets (vocab_size 50257 where the preset takes it from the tokenizer).
const Expect kPresets[] = {
    {"baseline-50m", 16777216, 16777216, 25165824, 0, {251707392, 254140416, 276848640}, {654949504, 735702016, 3983474688}},
    {"byte-11m", 98304, 98304, 10616832, 0, {64318464, 65687040, 78460416}, {108753408, 137182208, 1941635072}},
    {"server-4h", 64389120, 64389120, 393216000, 0, {2745937920, 2761144320, 3060357120}, {5480007808, 5798071296, 40182598656}},
    {"speedrun-10m", 38633472, 9658368, 1327104, 0, {65919744, 66261888, 66801024}, {535293760, 594923008, 940469248}},
    {"speedrun-30m", 38633472, 9658368, 1327104, 0, {65919744, 66261888, 69455232}, {535293760, 594923008, 1352141824}},
    {"speedrun-5m", 38633472, 9658368, 1327104, 0, {65919744, 66261888, 66801024}, {535293760, 594923008, 940469248}},
    {"d4", 12877824, 12877824, 3145728, 0, {96153600, 96761856, 102438912}, {341037952, 405978112, 1500433408}},
    {"d5", 16097280, 16097280, 6144000, 0, {133466880, 134417280, 143287680}, {448339392, 519828992, 2030160896}},
    {"d6", 19316736, 19316736, 10616832, 0, {179629056, 180997632, 193771008}, {570396160, 649673728, 2654522368}},
    {"d7", 22536192, 22536192, 16859136, 0, {236409600, 238272384, 255658368}, {710157376, 798461440, 3376466944}},
    {"d8", 25755648, 25755648, 25165824, 0, {305577984, 308011008, 330719232}, {870572160, 969141248, 4198943744}},
    {"d9", 28975104, 28975104, 35831808, 0, {388903680, 391982976, 420723072}, {1054589632, 1164662272, 5124901888}},
    {"d10", 32194560, 32194560, 49152000, 0, {488156160, 491957760, 527439360}, {1265158912, 1387973632, 6157290496}},
    {"d11", 35414016, 35414016, 65421312, 0, {605104896, 609704832, 652637568}, {1505229120, 1642024448, 7299058688}},
    {"d12", 38633472, 38633472, 84934656, 0, {741519360, 746993664, 798087168}, {1777749376, 1929763840, 8553155584}},
    {"d13", 41852928, 41852928, 107986944, 0, {899169024, 905593728, 965557632}, {2085668800, 2254140928, 9922530304}},
    {"d14", 45072384, 45072384, 134873088, 0, {1079823360, 1087274496, 1156818432}, {2431936512, 2618104832, 11410131968}},
    {"d15", 48291840, 48291840, 165888000, 0, {1285251840, 1293805440, 1373639040}, {2819501632, 3024604672, 13018909696}},
    {"d16", 51511296, 51511296, 201326592, 0, {1517223936, 1526956032, 1617788928}, {3251313536, 3476409344, 14739491840}},
    {"d17", 54730752, 54730752, 241483776, 0, {1777509120, 1788495744, 1891037568}, {3730323840, 3977008640, 16611789824}},
    {"d18", 57950208, 57950208, 286654464, 0, {2067876864, 2080194048, 2195154432}, {4259472896, 4528578560, 18586127360}},
    {"d19", 61169664, 61169664, 337133568, 0, {2390096640, 2403820416, 2531908992}, {4841722240, 5134945792, 20724763648}},
    {"d20", 64389120, 64389120, 393216000, 0, {2745937920, 2761144320, 2903070720}, {5480007808, 5798071296, 22964259840}},
};

const Expect kOdd[] = {
    {"odd0", 98304, 98304, 294912, 0, {2362752, 2533824, 2582208}, {5348160, 10238976, 44728320}},
    {"odd1", 98304, 0, 294912, 768, {2362752, 2533824, 2582208}, {4375360, 9591296, 46374400}},
    {"odd2", 163840, 98304, 393216, 6, {2953728, 3181824, 3246336}, {6995424, 12918240, 54690272}},
    {"odd3", 194304, 98304, 304128, 672, {3007872, 3178944, 3227328}, {6442880, 11225152, 44947520}},
    {"odd4", 30720, 30720, 258048, 0, {1736064, 1859512.3199999998, 1868040}, {3350208, 7320576, 35315712}},
    {"odd5", 144192, 0, 160768, 596, {1754496, 1813593.5999999999, 1815030}, {3371584, 7814336, 39133888}},
};

// Of each odd config built as GPT(cfg, 2, 64): num_params, grad_floats, flops_per_token(1), (100).
struct BuiltExpect {
  const char* name;
  int64_t num_params, grad_floats;
  double flops[2];
};
const BuiltExpect kOddBuilt[] = {
    {"odd0", 491520, 491520, {2362752, 2533824}},
    {"odd1", 393984, 393984, {2362752, 2533824}},
    {"odd2", 655366, 655408, {2953728, 3181824}},
    {"odd3", 597408, 597408, {3007872, 3178944}},
    {"odd4", 319488, 319488, {1736064, 1859512.3199999998}},
    {"odd5", 305556, 305632, {1754496, 1813593.5999999999}},
};

struct SlotExpect {
  const char* name;
  std::vector<int64_t> shape;
  int kind;  // ParamKind as int: Matrix 0, Embedding 1, Head 2, Scalar 3
  int64_t offset;
};

const std::vector<SlotExpect> kOdd0Slots = {
    {"wte", {1024, 96}, 1, 0},
    {"blocks.0.attn.wq", {96, 96}, 0, 98304},
    {"blocks.0.attn.wk", {32, 96}, 0, 107520},
    {"blocks.0.attn.wv", {32, 96}, 0, 110592},
    {"blocks.0.attn.wo", {96, 96}, 0, 113664},
    {"blocks.0.mlp.w_in", {384, 96}, 0, 122880},
    {"blocks.0.mlp.w_out", {96, 384}, 0, 159744},
    {"blocks.1.attn.wq", {96, 96}, 0, 196608},
    {"blocks.1.attn.wk", {32, 96}, 0, 205824},
    {"blocks.1.attn.wv", {32, 96}, 0, 208896},
    {"blocks.1.attn.wo", {96, 96}, 0, 211968},
    {"blocks.1.mlp.w_in", {384, 96}, 0, 221184},
    {"blocks.1.mlp.w_out", {96, 384}, 0, 258048},
    {"blocks.2.attn.wq", {96, 96}, 0, 294912},
    {"blocks.2.attn.wk", {32, 96}, 0, 304128},
    {"blocks.2.attn.wv", {32, 96}, 0, 307200},
    {"blocks.2.attn.wo", {96, 96}, 0, 310272},
    {"blocks.2.mlp.w_in", {384, 96}, 0, 319488},
    {"blocks.2.mlp.w_out", {96, 384}, 0, 356352},
    {"lm_head", {1024, 96}, 2, 393216},
};
const std::vector<SlotExpect> kOdd1Slots = {
    {"wte", {1024, 96}, 1, 0},
    {"blocks.0.attn_norm.gain", {96}, 3, 98304},
    {"blocks.0.attn.wq", {96, 96}, 0, 98400},
    {"blocks.0.attn.wk", {32, 96}, 0, 107616},
    {"blocks.0.attn.wv", {32, 96}, 0, 110688},
    {"blocks.0.attn.q_norm.gain", {16}, 3, 113760},
    {"blocks.0.attn.k_norm.gain", {16}, 3, 113776},
    {"blocks.0.attn.wo", {96, 96}, 0, 113792},
    {"blocks.0.mlp_norm.gain", {96}, 3, 123008},
    {"blocks.0.mlp.w_in", {256, 96}, 0, 123104},
    {"blocks.0.mlp.w_gate", {256, 96}, 0, 147680},
    {"blocks.0.mlp.w_out", {96, 256}, 0, 172256},
    {"blocks.1.attn_norm.gain", {96}, 3, 196832},
    {"blocks.1.attn.wq", {96, 96}, 0, 196928},
    {"blocks.1.attn.wk", {32, 96}, 0, 206144},
    {"blocks.1.attn.wv", {32, 96}, 0, 209216},
    {"blocks.1.attn.q_norm.gain", {16}, 3, 212288},
    {"blocks.1.attn.k_norm.gain", {16}, 3, 212304},
    {"blocks.1.attn.wo", {96, 96}, 0, 212320},
    {"blocks.1.mlp_norm.gain", {96}, 3, 221536},
    {"blocks.1.mlp.w_in", {256, 96}, 0, 221632},
    {"blocks.1.mlp.w_gate", {256, 96}, 0, 246208},
    {"blocks.1.mlp.w_out", {96, 256}, 0, 270784},
    {"blocks.2.attn_norm.gain", {96}, 3, 295360},
    {"blocks.2.attn.wq", {96, 96}, 0, 295456},
    {"blocks.2.attn.wk", {32, 96}, 0, 304672},
    {"blocks.2.attn.wv", {32, 96}, 0, 307744},
    {"blocks.2.attn.q_norm.gain", {16}, 3, 310816},
    {"blocks.2.attn.k_norm.gain", {16}, 3, 310832},
    {"blocks.2.attn.wo", {96, 96}, 0, 310848},
    {"blocks.2.mlp_norm.gain", {96}, 3, 320064},
    {"blocks.2.mlp.w_in", {256, 96}, 0, 320160},
    {"blocks.2.mlp.w_gate", {256, 96}, 0, 344736},
    {"blocks.2.mlp.w_out", {96, 256}, 0, 369312},
    {"final_norm.gain", {96}, 3, 393888},
};
const std::vector<SlotExpect> kOdd2Slots = {
    {"wte", {1024, 96}, 1, 0},
    {"blocks.2.attn.value_embed", {1024, 32}, 1, 98304},
    {"blocks.3.attn.value_embed", {1024, 32}, 1, 131072},
    {"blocks.0.attn.wq", {96, 96}, 0, 163840},
    {"blocks.0.attn.wk", {32, 96}, 0, 173056},
    {"blocks.0.attn.wv", {32, 96}, 0, 176128},
    {"blocks.0.attn.wo", {96, 96}, 0, 179200},
    {"blocks.0.mlp.w_in", {384, 96}, 0, 188416},
    {"blocks.0.mlp.w_out", {96, 384}, 0, 225280},
    {"blocks.1.x0_mix", {2}, 3, 262144},
    {"blocks.1.attn.wq", {96, 96}, 0, 262160},
    {"blocks.1.attn.wk", {32, 96}, 0, 271376},
    {"blocks.1.attn.wv", {32, 96}, 0, 274448},
    {"blocks.1.attn.wo", {96, 96}, 0, 277520},
    {"blocks.1.mlp.w_in", {384, 96}, 0, 286736},
    {"blocks.1.mlp.w_out", {96, 384}, 0, 323600},
    {"blocks.2.x0_mix", {2}, 3, 360464},
    {"blocks.2.attn.wq", {96, 96}, 0, 360480},
    {"blocks.2.attn.wk", {32, 96}, 0, 369696},
    {"blocks.2.attn.wv", {32, 96}, 0, 372768},
    {"blocks.2.attn.wo", {96, 96}, 0, 375840},
    {"blocks.2.mlp.w_in", {384, 96}, 0, 385056},
    {"blocks.2.mlp.w_out", {96, 384}, 0, 421920},
    {"blocks.3.x0_mix", {2}, 3, 458784},
    {"blocks.3.attn.wq", {96, 96}, 0, 458800},
    {"blocks.3.attn.wk", {32, 96}, 0, 468016},
    {"blocks.3.attn.wv", {32, 96}, 0, 471088},
    {"blocks.3.attn.wo", {96, 96}, 0, 474160},
    {"blocks.3.mlp.w_in", {384, 96}, 0, 483376},
    {"blocks.3.mlp.w_out", {96, 384}, 0, 520240},
    {"lm_head", {1024, 96}, 2, 557104},
};
const std::vector<SlotExpect> kOdd3Slots = {
    {"wte", {1024, 96}, 1, 0},
    {"bigram_embed", {1000, 96}, 1, 98304},
    {"blocks.0.attn_norm.gain", {96}, 3, 194304},
    {"blocks.0.attn.wq", {96, 96}, 0, 194400},
    {"blocks.0.attn.wk", {32, 96}, 0, 203616},
    {"blocks.0.attn.wv", {32, 96}, 0, 206688},
    {"blocks.0.attn.wo", {96, 96}, 0, 209760},
    {"blocks.0.mlp_norm.gain", {96}, 3, 218976},
    {"blocks.0.mlp.w_in", {384, 96}, 0, 219072},
    {"blocks.0.mlp.w_out", {96, 384}, 0, 255936},
    {"blocks.1.attn_norm.gain", {96}, 3, 292800},
    {"blocks.1.attn.wq", {96, 96}, 0, 292896},
    {"blocks.1.attn.wk", {32, 96}, 0, 302112},
    {"blocks.1.attn.wv", {32, 96}, 0, 305184},
    {"blocks.1.attn.wo", {96, 96}, 0, 308256},
    {"blocks.1.mlp_norm.gain", {96}, 3, 317472},
    {"blocks.1.mlp.w_in", {384, 96}, 0, 317568},
    {"blocks.1.mlp.w_out", {96, 384}, 0, 354432},
    {"blocks.2.attn_norm.gain", {96}, 3, 391296},
    {"blocks.2.attn.wq", {96, 96}, 0, 391392},
    {"blocks.2.attn.wk", {32, 96}, 0, 400608},
    {"blocks.2.attn.wv", {32, 96}, 0, 403680},
    {"blocks.2.attn.wo", {96, 96}, 0, 406752},
    {"blocks.2.mlp_norm.gain", {96}, 3, 415968},
    {"blocks.2.mlp.w_in", {384, 96}, 0, 416064},
    {"blocks.2.mlp.w_out", {96, 384}, 0, 452928},
    {"final_norm.gain", {96}, 3, 489792},
    {"lm_head", {1024, 96}, 2, 489888},
    {"mtp_proj", {96, 96}, 0, 588192},
};
const std::vector<SlotExpect> kOdd4Slots = {
    {"wte", {320, 96}, 1, 0},
    {"blocks.0.attn.wq", {96, 96}, 0, 30720},
    {"blocks.0.attn.wk", {96, 96}, 0, 39936},
    {"blocks.0.attn.wv", {96, 96}, 0, 49152},
    {"blocks.0.attn.wo", {96, 96}, 0, 58368},
    {"blocks.0.mlp.w_in", {256, 96}, 0, 67584},
    {"blocks.0.mlp.w_out", {96, 256}, 0, 92160},
    {"blocks.1.attn.wq", {96, 96}, 0, 116736},
    {"blocks.1.attn.wk", {96, 96}, 0, 125952},
    {"blocks.1.attn.wv", {96, 96}, 0, 135168},
    {"blocks.1.attn.wo", {96, 96}, 0, 144384},
    {"blocks.1.mlp.w_in", {256, 96}, 0, 153600},
    {"blocks.1.mlp.w_out", {96, 256}, 0, 178176},
    {"blocks.2.attn.wq", {96, 96}, 0, 202752},
    {"blocks.2.attn.wk", {96, 96}, 0, 211968},
    {"blocks.2.attn.wv", {96, 96}, 0, 221184},
    {"blocks.2.attn.wo", {96, 96}, 0, 230400},
    {"blocks.2.mlp.w_in", {256, 96}, 0, 239616},
    {"blocks.2.mlp.w_out", {96, 256}, 0, 264192},
    {"lm_head", {320, 96}, 2, 288768},
};
const std::vector<SlotExpect> kOdd5Slots = {
    {"wte", {1024, 64}, 1, 0},
    {"bigram_embed", {77, 64}, 1, 65536},
    {"blocks.0.attn.value_embed", {1024, 24}, 1, 70464},
    {"blocks.1.attn.value_embed", {1024, 24}, 1, 95040},
    {"blocks.2.attn.value_embed", {1024, 24}, 1, 119616},
    {"blocks.0.attn_norm.gain", {64}, 3, 144192},
    {"blocks.0.attn.wq", {96, 64}, 0, 144256},
    {"blocks.0.attn.wk", {24, 64}, 0, 150400},
    {"blocks.0.attn.wv", {24, 64}, 0, 151936},
    {"blocks.0.attn.q_norm.gain", {24}, 3, 153472},
    {"blocks.0.attn.k_norm.gain", {24}, 3, 153504},
    {"blocks.0.attn.wo", {64, 96}, 0, 153536},
    {"blocks.0.mlp_norm.gain", {64}, 3, 159680},
    {"blocks.0.mlp.w_in", {192, 64}, 0, 159744},
    {"blocks.0.mlp.w_gate", {192, 64}, 0, 172032},
    {"blocks.0.mlp.w_out", {64, 192}, 0, 184320},
    {"blocks.1.x0_mix", {2}, 3, 196608},
    {"blocks.1.attn_norm.gain", {64}, 3, 196624},
    {"blocks.1.attn.wq", {96, 64}, 0, 196688},
    {"blocks.1.attn.wk", {24, 64}, 0, 202832},
    {"blocks.1.attn.wv", {24, 64}, 0, 204368},
    {"blocks.1.attn.q_norm.gain", {24}, 3, 205904},
    {"blocks.1.attn.k_norm.gain", {24}, 3, 205936},
    {"blocks.1.attn.wo", {64, 96}, 0, 205968},
    {"blocks.1.mlp_norm.gain", {64}, 3, 212112},
    {"blocks.1.mlp.w_in", {192, 64}, 0, 212176},
    {"blocks.1.mlp.w_gate", {192, 64}, 0, 224464},
    {"blocks.1.mlp.w_out", {64, 192}, 0, 236752},
    {"blocks.2.x0_mix", {2}, 3, 249040},
    {"blocks.2.attn_norm.gain", {64}, 3, 249056},
    {"blocks.2.attn.wq", {96, 64}, 0, 249120},
    {"blocks.2.attn.wk", {24, 64}, 0, 255264},
    {"blocks.2.attn.wv", {24, 64}, 0, 256800},
    {"blocks.2.attn.q_norm.gain", {24}, 3, 258336},
    {"blocks.2.attn.k_norm.gain", {24}, 3, 258368},
    {"blocks.2.attn.wo", {64, 96}, 0, 258400},
    {"blocks.2.mlp_norm.gain", {64}, 3, 264544},
    {"blocks.2.mlp.w_in", {192, 64}, 0, 264608},
    {"blocks.2.mlp.w_gate", {192, 64}, 0, 276896},
    {"blocks.2.mlp.w_out", {64, 192}, 0, 289184},
    {"final_norm.gain", {64}, 3, 301472},
    {"mtp_proj", {64, 64}, 0, 301536},
};
const std::vector<SlotExpect>* kOddSlots[] = {&kOdd0Slots, &kOdd1Slots, &kOdd2Slots, &kOdd3Slots, &kOdd4Slots, &kOdd5Slots};

ModelConfig odd(int which) {
  ModelConfig c;
  c.n_layer = 3;
  c.d_model = 96;
  c.n_head = 6;
  c.n_kv_head = 2;
  c.head_dim = 16;
  c.mlp_ratio = 4.0f;
  c.vocab_size = 1000;
  c.seq_len = 128;
  switch (which) {
    case 0: break;  // GQA, relu2, untied
    case 1: c.activation = "swiglu", c.norm_gain = true, c.tie_embeddings = true; break;
    case 2: c.n_layer = 4, c.value_embeds = 2, c.x0_skips = true, c.activation = "gelu"; break;
    case 3: c.bigram_buckets = 1000, c.mtp_weight = 0.5f, c.norm_gain = true, c.qk_norm = false; break;
    case 4: c.attn_window = 48, c.mlp_ratio = 2.6f, c.n_kv_head = 6, c.vocab_size = 257; break;
    default:  // MQA with head_dim * n_head != d_model and every feature at once
      c.d_model = 64, c.n_head = 4, c.n_kv_head = 1, c.head_dim = 24, c.activation = "swiglu";
      c.mtp_weight = 1.0f, c.tie_embeddings = true, c.bigram_buckets = 77, c.value_embeds = 3;
      c.x0_skips = true, c.norm_gain = true, c.attn_window = 20;
  }
  return c;
}

void expect_numbers(const ModelConfig& m, const Expect& e) {
  SCOPED_TRACE(e.name);
  const ModelLayout l = model_layout(m);
  EXPECT_EQ(l.counts.embed, e.embed);
  EXPECT_EQ(l.counts.head, e.head);
  EXPECT_EQ(l.counts.matrix, e.matrix);
  EXPECT_EQ(l.counts.scalar, e.scalar);
  EXPECT_EQ(count_params(m).total(), e.embed + e.head + e.matrix + e.scalar);
  const int Ts[3] = {1, 100, m.seq_len};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(l.flops_per_token(Ts[i]), e.flops[i]) << "T=" << Ts[i];
    EXPECT_EQ(flops_per_token(m, Ts[i]), e.flops[i]) << "T=" << Ts[i];
  }
  // The bytes are the earlier ones plus the logits' row padding: the logits and their bf16
  // gradient buffer, chunk_rows rows each, logits_row_stride(Vp) - Vp floats more per row.
  const int shapes[3][2] = {{1, 1}, {2, 64}, {8, m.seq_len}};
  for (int i = 0; i < 3; ++i) {
    const auto [B, T] = shapes[i];
    const ModelLayout lb = model_layout(m, B, T);
    const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(int64_t(B) * T, (int64_t(1) << 25) / lb.Vp));
    const size_t pad = size_t(2 * 4 * rows * (logits_row_stride(lb.Vp) - lb.Vp));
    EXPECT_EQ(lb.act.chunk_rows, rows);
    EXPECT_EQ(lb.bytes, e.bytes[i] + pad) << "B=" << B << " T=" << T;
    EXPECT_EQ(GPT::memory_need(m, B, T, cpu_backend()), e.bytes[i] + pad) << "B=" << B << " T=" << T;
  }
}

}  // namespace

TEST(ModelLayout, PresetCountsFlopsAndBytesAreUnchanged) {
  std::vector<std::string> names = preset_names();
  ASSERT_EQ(names.size(), std::size(kPresets));
  for (size_t i = 0; i < names.size(); ++i) {
    ASSERT_EQ(names[i], kPresets[i].name);
    RunConfig c = load_config(names[i]);
    if (c.model.vocab_size == 0) c.model.vocab_size = 50257;
    expect_numbers(c.model, kPresets[i]);
  }
}

TEST(ModelLayout, FeatureConfigsCountsFlopsAndBytesAreUnchanged) {
  for (int i = 0; i < 6; ++i) expect_numbers(odd(i), kOdd[i]);
}

TEST(ModelLayout, LogitsRowStrideIsTheLeastOddMultipleOf16FromVp) {
  for (int64_t Vp : {int64_t(1), int64_t(16), int64_t(64), int64_t(257), int64_t(8192), int64_t(50304),
                     int64_t(65536)}) {
    const int64_t ld = logits_row_stride(Vp);
    EXPECT_GE(ld, Vp);
    EXPECT_EQ(ld % 32, 16) << Vp;  // an odd number of 64-byte lines
    EXPECT_LT(ld - 32, Vp) << Vp;  // the least such
  }
  EXPECT_EQ(logits_row_stride(8192), 8208);
  EXPECT_EQ(logits_row_stride(8208), 8208);
  EXPECT_EQ(model_layout(odd(0), 2, 64).act.logits_ld, logits_row_stride(model_layout(odd(0)).Vp));
}

TEST(ModelLayout, ParameterTableIsUnchanged) {
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE(kOdd[i].name);
    const ModelLayout l = model_layout(odd(i));
    const auto& want = *kOddSlots[i];
    ASSERT_EQ(l.params.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(l.params[k].name, want[k].name);
      EXPECT_EQ(l.params[k].shape, want[k].shape) << want[k].name;
      EXPECT_EQ(int(l.params[k].kind), want[k].kind) << want[k].name;
      EXPECT_EQ(l.params[k].offset, want[k].offset) << want[k].name;
    }
    EXPECT_EQ(l.param_floats, kOddBuilt[i].grad_floats);
    EXPECT_EQ(l.num_params(), kOddBuilt[i].num_params);
  }
}

// The model's Params point at the layout's offsets; its counts are the layout's.
TEST(ModelLayout, GPTCarvesItsBuffersFromTheLayout) {
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE(kOddBuilt[i].name);
    const ModelConfig c = odd(i);
    GPT g(c, 2, 64);
    const ModelLayout l = model_layout(c, 2, 64);
    ASSERT_EQ(g.params().size(), l.params.size());
    const float* base = g.params()[0].data;
    for (size_t k = 0; k < l.params.size(); ++k) {
      const Param& p = g.params()[k];
      EXPECT_EQ(p.name, l.params[k].name);
      EXPECT_EQ(p.shape, l.params[k].shape);
      EXPECT_EQ(p.kind, l.params[k].kind);
      EXPECT_EQ(p.data - base, l.params[k].offset) << p.name;
      EXPECT_EQ(p.grad - g.grad_buffer(), l.params[k].offset) << p.name;
    }
    EXPECT_EQ(g.num_params(), kOddBuilt[i].num_params);
    EXPECT_EQ(g.grad_floats(), kOddBuilt[i].grad_floats);
    EXPECT_EQ(g.flops_per_token(1), kOddBuilt[i].flops[0]);
    EXPECT_EQ(g.flops_per_token(100), kOddBuilt[i].flops[1]);
  }
}

// Views follow each other without gaps or overlap, each on a 16-float boundary, and fill the arena;
// the byte total is params + grads + bf16 mirror + arena + io.
TEST(ModelLayout, ActivationViewsTileTheArena) {
  for (int i = 0; i < 6; ++i) {
    const ModelLayout l = model_layout(odd(i), 3, 40);
    const ActivationPlan& a = l.act;
    EXPECT_EQ(a.rows, 120);
    ASSERT_FALSE(a.views.empty());
    int64_t at = 0;
    for (const auto& v : a.views) {
      EXPECT_EQ(v.offset, at) << v.name;
      EXPECT_EQ(v.offset % kLayoutAlign, 0) << v.name;
      EXPECT_EQ(v.floats % kLayoutAlign, 0) << v.name;
      at += v.floats;
    }
    EXPECT_EQ(at, a.floats);
    EXPECT_EQ(a.blocks.size(), size_t(l.L));
    EXPECT_EQ(a.blocks[0].xpre, -1);  // the first block has no embedding skip
    EXPECT_EQ(a.blocks.back().xpre >= 0, l.cfg.x0_skips);
    EXPECT_EQ(a.blocks[0].qraw >= 0, l.cfg.qk_norm);
    EXPECT_EQ(a.mtp_u >= 0, l.cfg.mtp_weight > 0);
    EXPECT_EQ(l.bytes, size_t(l.param_floats) * 10 + size_t(a.floats) * 4 + size_t(a.io_stride) * 4 * a.io_arrays);
  }
  EXPECT_TRUE(model_layout(odd(0)).act.views.empty());  // no tokens, no arena
}

// The GPT refuses what validate refuses (one check of a model config), and a model without a
// vocabulary or without room for tokens.
TEST(ModelLayout, ConfigChecksLiveInValidate) {
  auto refused = [](ModelConfig c, const std::string& key) {
    try {
      validate(c);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_THROW(GPT(c, 1, 4), Error) << key;
      EXPECT_THROW(GPT::memory_need(c, 1, 4, cpu_backend()), Error) << key;
      return;
    }
    ADD_FAILURE() << key << " accepted";
  };
  ModelConfig c = odd(0);
  validate(c);
  c.n_kv_head = 4;
  refused(c, "model.n_kv_head");
  c = odd(0), c.head_dim = 7;
  refused(c, "model.head_dim");
  c = odd(0), c.activation = "tanh";
  refused(c, "model.activation");
  c = odd(0), c.bigram_buckets = 1;
  refused(c, "model.bigram_buckets");
  c = odd(0), c.value_embeds = 4;
  refused(c, "model.value_embeds");
  c = odd(0), c.attn_window = -1;
  refused(c, "model.attn_window");
  c = odd(0), c.mtp_weight = -1.0f;
  refused(c, "model.mtp_weight");
  c = odd(0), c.vocab_size = 0;  // valid (taken from the tokenizer later), but no model without it
  validate(c);
  EXPECT_THROW(GPT(c, 1, 4), Error);
  EXPECT_THROW(GPT::memory_need(odd(0), 0, 4, cpu_backend()), Error);
}

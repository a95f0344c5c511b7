// Run configuration: presets, strict JSON (de)serialisation, `--set key=value` overrides and
// validation. Every key is reached through one table of fields (fields_of), so parsing, printing,
// overrides and the unknown-key check can never disagree. Keys are documented in docs/CONFIG.md.
#include "config/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string_view>
#include <variant>

#include "core/common.h"
#include "core/json_parse.h"

namespace clm {

namespace {

// One configurable value: its dotted key ("model.n_layer", "optim.matrix.lr") and where it lives.
using FieldPtr = std::variant<int*, int64_t*, uint64_t*, float*, double*, bool*, std::string*>;
struct Field {
  std::string key;
  FieldPtr ptr;
};

void add_group(std::vector<Field>& f, const std::string& prefix, OptimGroup& g) {
  f.push_back({prefix + ".kind", &g.kind});
  f.push_back({prefix + ".lr", &g.lr});
  f.push_back({prefix + ".beta1", &g.beta1});
  f.push_back({prefix + ".beta2", &g.beta2});
  f.push_back({prefix + ".eps", &g.eps});
  f.push_back({prefix + ".momentum", &g.momentum});
  f.push_back({prefix + ".nesterov", &g.nesterov});
  f.push_back({prefix + ".ns_steps", &g.ns_steps});
  f.push_back({prefix + ".ns_precision", &g.ns_precision});
  f.push_back({prefix + ".ns_coeffs", &g.ns_coeffs});
  f.push_back({prefix + ".weight_decay", &g.weight_decay});
  f.push_back({prefix + ".cautious_wd", &g.cautious_wd});
}

std::vector<Field> fields_of(RunConfig& c) {
  std::vector<Field> f;
  f.push_back({"name", &c.name});
  ModelConfig& m = c.model;
  f.push_back({"model.n_layer", &m.n_layer});
  f.push_back({"model.d_model", &m.d_model});
  f.push_back({"model.n_head", &m.n_head});
  f.push_back({"model.n_kv_head", &m.n_kv_head});
  f.push_back({"model.head_dim", &m.head_dim});
  f.push_back({"model.mlp_ratio", &m.mlp_ratio});
  f.push_back({"model.activation", &m.activation});
  f.push_back({"model.norm_eps", &m.norm_eps});
  f.push_back({"model.norm_gain", &m.norm_gain});
  f.push_back({"model.rope_base", &m.rope_base});
  f.push_back({"model.qk_norm", &m.qk_norm});
  f.push_back({"model.tie_embeddings", &m.tie_embeddings});
  f.push_back({"model.logit_softcap", &m.logit_softcap});
  f.push_back({"model.bigram_buckets", &m.bigram_buckets});
  f.push_back({"model.value_embeds", &m.value_embeds});
  f.push_back({"model.attn_window", &m.attn_window});
  f.push_back({"model.x0_skips", &m.x0_skips});
  f.push_back({"model.smear", &m.smear});
  f.push_back({"model.mtp_weight", &m.mtp_weight});
  f.push_back({"model.vocab_size", &m.vocab_size});
  f.push_back({"model.seq_len", &m.seq_len});
  f.push_back({"model.init_std", &m.init_std});
  f.push_back({"model.zero_init_out", &m.zero_init_out});
  f.push_back({"model.matmul_precision", &m.matmul_precision});
  OptimConfig& o = c.optim;
  add_group(f, "optim.matrix", o.matrix);
  add_group(f, "optim.embed", o.embed);
  add_group(f, "optim.head", o.head);
  add_group(f, "optim.scalar", o.scalar);
  f.push_back({"optim.grad_clip", &o.grad_clip});
  f.push_back({"optim.shard_state", &o.shard_state});
  TrainConfig& t = c.train;
  f.push_back({"train.batch_tokens", &t.batch_tokens});
  f.push_back({"train.micro_batch", &t.micro_batch});
  f.push_back({"train.budget_seconds", &t.budget_seconds});
  f.push_back({"train.max_steps", &t.max_steps});
  f.push_back({"train.warmup_frac", &t.warmup_frac});
  f.push_back({"train.warmdown_frac", &t.warmdown_frac});
  f.push_back({"train.final_lr_frac", &t.final_lr_frac});
  f.push_back({"train.warmdown_shape", &t.warmdown_shape});
  f.push_back({"train.muon_momentum_start", &t.muon_momentum_start});
  f.push_back({"train.muon_momentum_warmup_frac", &t.muon_momentum_warmup_frac});
  f.push_back({"train.wd_schedule", &t.wd_schedule});
  f.push_back({"train.eval_every_seconds", &t.eval_every_seconds});
  f.push_back({"train.val_tokens", &t.val_tokens});
  f.push_back({"train.periodic_val_tokens", &t.periodic_val_tokens});
  f.push_back({"train.eval_batch", &t.eval_batch});
  f.push_back({"train.checkpoint_every_seconds", &t.checkpoint_every_seconds});
  f.push_back({"train.keep_checkpoints", &t.keep_checkpoints});
  f.push_back({"train.log_every", &t.log_every});
  f.push_back({"train.seed", &t.seed});
  f.push_back({"train.threads", &t.threads});
  f.push_back({"train.seq_schedule", &t.seq_schedule});
  f.push_back({"train.batch_schedule", &t.batch_schedule});
  f.push_back({"train.graph", &t.graph});
  return f;
}

// A finite value that T holds without overflow (a double outside float's range converts to
// undefined behaviour, not to infinity).
template <typename T>
bool fits(double d) {
  return std::isfinite(d) && std::fabs(d) <= double(std::numeric_limits<T>::max());
}

const char* type_name(const FieldPtr& p) {
  switch (p.index()) {
    case 0: case 1: return "an integer";
    case 2: return "a non-negative integer";
    case 3: case 4: return "a number";
    case 5: return "true or false";
    default: return "a string";
  }
}

// Assign a JSON value to a field, checking its type strictly (no silent bool->int, string->int).
void set_from_json(const Field& f, const nlohmann::json& v) {
  auto bad = [&] { fail("config key '{}' must be {}, got {}", f.key, type_name(f.ptr), v.dump()); };
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) bad();
          *p = v.get<bool>();
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!v.is_string()) bad();
          *p = v.get<std::string>();
        } else if constexpr (std::is_floating_point_v<T>) {
          if (!v.is_number() || !fits<T>(v.get<double>())) bad();
          *p = T(v.get<double>());
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          if (!v.is_number_unsigned()) bad();
          *p = v.get<uint64_t>();
        } else if (v.is_number_unsigned()) {
          if (v.get<uint64_t>() > uint64_t(std::numeric_limits<T>::max())) bad();
          *p = T(v.get<uint64_t>());
        } else if (v.is_number_integer()) {
          int64_t i = v.get<int64_t>();
          if (i < int64_t(std::numeric_limits<T>::min()) || i > int64_t(std::numeric_limits<T>::max()))
            bad();
          *p = T(i);
        } else {
          // Accept 3.0 for an integer, but not 3.5. T's range is [min, -min): -min is a power of
          // two, exact as a double, unlike max.
          if (!v.is_number_float()) bad();
          double d = v.get<double>();
          if (std::floor(d) != d || !(d >= double(std::numeric_limits<T>::min())) ||
              !(d < -double(std::numeric_limits<T>::min())))
            bad();
          *p = T(d);
        }
      },
      f.ptr);
}

// Parse the text of `--set key=value` for the field's type.
void set_from_text(const Field& f, const std::string& text) {
  auto bad = [&] { fail("--set {}={}: value must be {}", f.key, text, type_name(f.ptr)); };
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>) {
          if (text == "true" || text == "1") *p = true;
          else if (text == "false" || text == "0") *p = false;
          else bad();
        } else if constexpr (std::is_same_v<T, std::string>) {
          *p = text;
        } else if constexpr (std::is_floating_point_v<T>) {
          char* end = nullptr;
          errno = 0;
          double d = std::strtod(text.c_str(), &end);
          if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || !fits<T>(d)) bad();
          *p = T(d);
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          char* end = nullptr;
          errno = 0;
          if (text.empty() || text[0] == '-') bad();
          unsigned long long v = std::strtoull(text.c_str(), &end, 10);
          if (end != text.c_str() + text.size() || errno == ERANGE) bad();
          *p = uint64_t(v);
        } else {
          char* end = nullptr;
          errno = 0;
          long long v = std::strtoll(text.c_str(), &end, 10);
          if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) bad();
          if (v < (long long)std::numeric_limits<T>::min() || v > (long long)std::numeric_limits<T>::max()) bad();
          *p = T(v);
        }
      },
      f.ptr);
}

nlohmann::json get_json(const Field& f) {
  return std::visit(
      [](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        // A float prints as its shortest decimal (0.02, not 0.019999999552965164); it parses back to
        // the same float bits.
        if constexpr (std::is_same_v<T, float>) return nlohmann::json(std::stod(fmt::format("{}", *p)));
        else return nlohmann::json(*p);
      },
      f.ptr);
}

// Flatten nested objects to dotted keys ("model": {"n_layer": 8} -> "model.n_layer").
// Keys are at most three levels deep ("optim.matrix.lr": two nested objects), so deeper nesting is
// refused before the recursion could run deep on a hostile file.
void flatten(const nlohmann::json& j, const std::string& prefix,
             std::vector<std::pair<std::string, nlohmann::json>>& out, int depth = 0) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      if (depth >= 2) fail("unknown config key '{}' (nested too deep)", key);
      flatten(*it, key, out, depth + 1);
    } else {
      out.emplace_back(key, *it);
    }
  }
}

// ---- presets -------------------------------------------------------------------------------

// AdamW learning rates for embeddings and head shrink with width as 1/sqrt(d_model) (reference width
// 768, as in nanochat); Muon's lr is width-independent thanks to its rows/cols scaling.
void scale_adamw_lrs(RunConfig& c) {
  double s = std::sqrt(768.0 / c.model.d_model);
  c.optim.embed.lr = float(0.2 * s);
  c.optim.head.lr = float(0.004 * s);
}

RunConfig preset_baseline_50m() {
  RunConfig c;
  c.name = "baseline-50m";
  c.model.n_layer = 8;
  c.model.d_model = 512;
  c.model.n_head = 8;
  c.model.n_kv_head = 8;
  c.model.head_dim = 64;
  c.model.mlp_ratio = 4.0f;
  c.model.activation = "relu2";
  c.model.tie_embeddings = false;
  c.model.vocab_size = 32768;
  c.model.seq_len = 1024;
  scale_adamw_lrs(c);
  // Steps of 4096 tokens: many steps fit a 10-minute CPU budget, yet each is large enough that
  // Muon's Newton-Schulz, whose cost does not shrink with the batch, stays a modest share of it.
  c.train.batch_tokens = 4096;
  c.train.micro_batch = 4;
  return c;
}

// d<N>: the one-knob family. width = 64*N, n_layer = N. head_dim = 128 once the width reaches 1024
// and divides by 128 (N >= 16, N even), else 64; n_head = n_kv_head = width / head_dim. The batch grows
// with depth (512*N tokens rounded up to whole micro-batches), AdamW lrs as 1/sqrt(width).
RunConfig preset_d(int N) {
  RunConfig c;
  c.name = fmt::format("d{}", N);
  int width = 64 * N;
  c.model.n_layer = N;
  c.model.d_model = width;
  c.model.head_dim = (width >= 1024 && width % 128 == 0) ? 128 : 64;
  c.model.n_head = width / c.model.head_dim;
  c.model.n_kv_head = c.model.n_head;
  c.model.mlp_ratio = 4.0f;
  c.model.activation = "relu2";
  c.model.vocab_size = 0;  // from the dataset's tokenizer
  c.model.seq_len = 1024;
  c.train.micro_batch = N >= 16 ? 2 : 4;
  int64_t micro_tokens = int64_t(c.train.micro_batch) * c.model.seq_len;
  int64_t want = 512LL * N;
  c.train.batch_tokens = (want + micro_tokens - 1) / micro_tokens * micro_tokens;
  scale_adamw_lrs(c);
  return c;
}

RunConfig preset_byte_11m() {
  RunConfig c;
  c.name = "byte-11m";
  c.model.n_layer = 6;
  c.model.d_model = 384;
  c.model.n_head = 6;
  c.model.n_kv_head = 6;
  c.model.head_dim = 64;
  c.model.vocab_size = 256;
  c.model.seq_len = 1024;
  c.train.batch_tokens = 16384;
  c.train.micro_batch = 8;
  scale_adamw_lrs(c);
  return c;
}

// The server stage: 4 hours on one 8-GPU host. The model is d20's shape (20 layers of width 1280,
// ~0.5B parameters with a 64K vocabulary), the size a 4-hour 8-GPU budget trains near its
// compute-optimal token count (about 20 tokens per parameter); half a million tokens per step as
// nanochat uses at this size, reached by each of 8 ranks with gradient accumulation; a 20%
// warmdown; 10M validation tokens for the final bpb. Fewer ranks accumulate more micro-batches.
RunConfig preset_server_4h() {
  RunConfig c = preset_d(20);
  c.name = "server-4h";
  c.model.seq_len = 2048;
  c.train.micro_batch = 16;        // ~76 GiB per rank with a 64K vocabulary (`clocklm model`)
  c.train.batch_tokens = 524288;  // 8 ranks x 2 micro-batches x 16 rows x 2048
  c.train.budget_seconds = 4 * 3600;
  c.train.warmdown_frac = 0.2f;
  c.train.eval_every_seconds = 1800;
  c.train.checkpoint_every_seconds = 1800;
  c.train.val_tokens = 10 * (int64_t(1) << 20);
  c.train.periodic_val_tokens = int64_t(1) << 20;
  c.train.keep_checkpoints = 2;
  return c;
}

// The 10-minute CPU recipe: a small, fast shape, 3 layers of width 192 (AdamW lrs by the
// 1/sqrt(width) rule) and 256-token rows (16 per micro-batch of 4096 tokens), with a value embedding
// in every block and Muon's Newton-Schulz on Polar Express coefficients; vocab from the dataset;
// budget 10 minutes. Steps of 4096 tokens for the first half of the budget, then 8192
// (train.batch_schedule, the same tokens read); a warmdown over the last quarter of the budget
// that stops at a tenth of the lr (a decay to zero over the last 40% costs ~0.011 bpb at 5 and
// 10 minutes). Why each choice: bench/RESULTS.md, "Presets".
RunConfig preset_speedrun_10m() {
  RunConfig c;
  c.name = "speedrun-10m";
  c.model.n_layer = 3;
  c.model.d_model = 192;
  c.model.n_head = 3;
  c.model.n_kv_head = 3;
  c.model.head_dim = 64;
  c.model.mlp_ratio = 4.0f;
  c.model.activation = "relu2";
  c.model.tie_embeddings = false;
  c.model.vocab_size = 0;  // from the dataset's tokenizer
  c.model.seq_len = 256;
  c.model.value_embeds = 3;
  scale_adamw_lrs(c);
  c.optim.matrix.ns_coeffs = "polar";
  c.train.batch_tokens = 8192;
  c.train.batch_schedule = "4096@0.5";
  c.train.micro_batch = 16;
  c.train.warmdown_frac = 0.25f;
  c.train.final_lr_frac = 0.1f;
  c.train.budget_seconds = 600;
  return c;
}

// The 30-minute CPU recipe: the depth rule at depth 3 (3 x 192, 1024-token rows) with the two
// levers of the 10-minute shape, a value embedding in every block and Polar Express coefficients.
// Budget 30 minutes. Why this shape: bench/RESULTS.md, "Presets".
RunConfig preset_speedrun_30m() {
  RunConfig c = preset_d(3);
  c.name = "speedrun-30m";
  c.model.value_embeds = 3;
  c.optim.matrix.ns_coeffs = "polar";
  c.train.budget_seconds = 1800;
  return c;
}

// The 5-minute CPU recipe: `speedrun-10m` with a 5-minute budget (nothing screened on top of it at
// 300 s did better). Why: bench/RESULTS.md, "Presets".
RunConfig preset_speedrun_5m() {
  RunConfig c = preset_speedrun_10m();
  c.name = "speedrun-5m";
  c.train.budget_seconds = 300;
  return c;
}

// The named presets, in the order `preset_names` lists them; `made_for_budget`: the recipe was
// chosen by runs at its train.budget_seconds (the planner defers to it at that budget), rather than
// that budget being only a default.
struct NamedPreset {
  const char* name;
  RunConfig (*make)();
  bool made_for_budget;
};
const NamedPreset kNamedPresets[] = {
    {"baseline-50m", preset_baseline_50m, false}, {"byte-11m", preset_byte_11m, false},
    {"server-4h", preset_server_4h, true},        {"speedrun-10m", preset_speedrun_10m, true},
    {"speedrun-30m", preset_speedrun_30m, true},  {"speedrun-5m", preset_speedrun_5m, true},
};

bool find_preset(const std::string& name, RunConfig& out) {
  for (const NamedPreset& p : kNamedPresets)
    if (name == p.name) {
      out = p.make();
      return true;
    }
  if (name.size() >= 2 && name[0] == 'd') {
    char* end = nullptr;
    long n = std::strtol(name.c_str() + 1, &end, 10);
    if (end == name.c_str() + name.size() && n >= 4 && n <= 20 && std::to_string(n) == name.substr(1)) {
      out = preset_d(int(n));
      return true;
    }
  }
  return false;
}

void apply_json(RunConfig& c, const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail("{}: a config must be a JSON object", where);
  std::vector<std::pair<std::string, nlohmann::json>> flat;
  flatten(j, "", flat);
  auto fields = fields_of(c);
  for (auto& [key, value] : flat) {
    if (key == "base") continue;
    if (key.ends_with(".ns_bf16") && value.is_boolean()) {  // the boolean that ns_precision replaced
      key = key.substr(0, key.size() - 7) + "ns_precision";
      value = value.get<bool>() ? "bf16" : "fp32";
    }
    const Field* f = nullptr;
    for (auto& fd : fields)
      if (fd.key == key) { f = &fd; break; }
    if (!f) fail("{}: unknown config key '{}'", where, key);
    set_from_json(*f, value);
  }
}

}  // namespace

RunConfig depth_config(int n_layer) {
  if (n_layer < 1 || n_layer > 64) fail("depth {} is outside 1..64", n_layer);
  return preset_d(n_layer);
}

RunConfig recipe_at_depth(const RunConfig& recipe, int n_layer) {
  const RunConfig shape = depth_config(n_layer);
  RunConfig c = recipe;
  c.name = fmt::format("{}@d{}", recipe.name, n_layer);
  c.model.n_layer = shape.model.n_layer;
  c.model.d_model = shape.model.d_model;
  c.model.head_dim = shape.model.head_dim;
  c.model.n_head = shape.model.n_head;
  // Grouped-query attention keeps its ratio where the new head count allows it.
  const int group = recipe.model.n_head / std::max(recipe.model.n_kv_head, 1);
  c.model.n_kv_head = group > 0 && c.model.n_head % group == 0 ? c.model.n_head / group : c.model.n_head;
  // A value embedding in every block stays so; a count below the depth stays the same count.
  c.model.value_embeds = recipe.model.value_embeds >= recipe.model.n_layer
                             ? n_layer
                             : std::min(recipe.model.value_embeds, n_layer);
  scale_adamw_lrs(c);
  return c;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (const NamedPreset& p : kNamedPresets) v.push_back(p.name);
  for (int n = 4; n <= 20; ++n) v.push_back(fmt::format("d{}", n));
  return v;
}

double preset_made_for_seconds(const std::string& name) {
  for (const NamedPreset& p : kNamedPresets)
    if (name == p.name) return p.made_for_budget ? p.make().train.budget_seconds : 0;
  return 0;
}

nlohmann::json to_json(const RunConfig& cfg) {
  RunConfig c = cfg;
  nlohmann::json j = nlohmann::json::object();
  for (auto& f : fields_of(c)) {
    std::string ptr = "/" + f.key;
    for (auto& ch : ptr)
      if (ch == '.') ch = '/';
    j[nlohmann::json::json_pointer(ptr)] = get_json(f);
  }
  return j;
}

RunConfig run_config_from_json(const nlohmann::json& j) {
  RunConfig c;
  if (j.is_object() && j.contains("base")) {
    if (!j["base"].is_string() || !find_preset(j["base"].get<std::string>(), c))
      fail("config: 'base' must name a preset ({})", fmt::join(preset_names(), ", "));
  }
  apply_json(c, j, "config");
  return c;
}

RunConfig config_from_json_text(std::string_view text, const std::string& where,
                                const std::string& name) {
  const nlohmann::json j = parse_json(text, where);  // also refuses a number too large for a double
  RunConfig c;
  if (j.is_object() && j.contains("base")) {
    if (!j["base"].is_string() || !find_preset(j["base"].get<std::string>(), c))
      fail("{}: 'base' must name a preset ({})", where, fmt::join(preset_names(), ", "));
  }
  c.name = name;
  apply_json(c, j, where);
  return c;
}

void apply_overrides(RunConfig& c, const std::vector<std::string>& overrides) {
  auto fields = fields_of(c);
  for (const std::string& ov : overrides) {
    auto eq = ov.find('=');
    if (eq == std::string::npos || eq == 0) fail("--set '{}': expected key=value", ov);
    std::string key = ov.substr(0, eq), value = ov.substr(eq + 1);
    std::vector<const Field*> hits;
    for (auto& f : fields) {
      if (f.key == key) { hits = {&f}; break; }
      // A bare or partial key matches a field whose dotted key ends with ".<key>".
      if (f.key.size() > key.size() && f.key.compare(f.key.size() - key.size(), key.size(), key) == 0 &&
          f.key[f.key.size() - key.size() - 1] == '.')
        hits.push_back(&f);
    }
    if (hits.empty()) fail("--set: unknown config key '{}'", key);
    if (hits.size() > 1) {
      std::vector<std::string> names;
      for (auto* h : hits) names.push_back(h->key);
      fail("--set: key '{}' is ambiguous ({})", key, fmt::join(names, ", "));
    }
    set_from_text(*hits[0], value);
  }
}

RunConfig load_config(const std::string& name_or_path, const std::vector<std::string>& overrides) {
  RunConfig c;
  if (!find_preset(name_or_path, c)) {
    if (!path_exists(name_or_path))
      fail("config '{}' is neither a preset ({}) nor an existing file", name_or_path,
           fmt::join(preset_names(), ", "));
    c = config_from_json_text(read_file(name_or_path), name_or_path,
                              std::filesystem::path(name_or_path).stem().string());
  }
  apply_overrides(c, overrides);
  validate(c);
  return c;
}

void validate(const RunConfig& c) {
  const ModelConfig& m = c.model;
  validate(m);  // the model.* keys (model/config_check.cpp)
  // Upper bounds far beyond any run this code can train (no integer overflow in the sizes).
  auto at_most = [](const char* key, int64_t v, int64_t max) {
    if (v > max) fail("{} is {}, beyond any supported model (at most {})", key, v, max);
  };
  at_most("train.micro_batch", c.train.micro_batch, 1 << 20);
  at_most("train.eval_batch", c.train.eval_batch, 1 << 20);
  auto check_prec = [](const std::string& key, const std::string& v) {
    if (v != "auto" && v != "bf16" && v != "fp32") fail("{} '{}' is unknown (auto, bf16, fp32)", key, v);
  };

  auto check_group = [&](const char* name, const OptimGroup& g) {
    check_prec(fmt::format("optim.{}.ns_precision", name), g.ns_precision);
    if (g.kind != "adamw" && g.kind != "muon" && g.kind != "normuon")
      fail("optim.{}.kind '{}' is unknown (adamw, muon, normuon)", name, g.kind);
    if (!(g.lr >= 0) || !std::isfinite(g.lr)) fail("optim.{}.lr must be >= 0, got {}", name, g.lr);
    if (!(g.beta1 >= 0 && g.beta1 < 1)) fail("optim.{}.beta1 must be in [0, 1), got {}", name, g.beta1);
    if (!(g.beta2 >= 0 && g.beta2 < 1)) fail("optim.{}.beta2 must be in [0, 1), got {}", name, g.beta2);
    if (!(g.eps > 0)) fail("optim.{}.eps must be > 0, got {}", name, g.eps);
    if (!(g.momentum >= 0 && g.momentum < 1)) fail("optim.{}.momentum must be in [0, 1), got {}", name, g.momentum);
    if (g.ns_steps < 1 || g.ns_steps > 20) fail("optim.{}.ns_steps must be in [1, 20], got {}", name, g.ns_steps);
    if (g.ns_coeffs != "quintic" && g.ns_coeffs != "polar")
      fail("optim.{}.ns_coeffs '{}' is unknown (quintic, polar)", name, g.ns_coeffs);
    if (!(g.weight_decay >= 0)) fail("optim.{}.weight_decay must be >= 0, got {}", name, g.weight_decay);
  };
  check_group("matrix", c.optim.matrix);
  check_group("embed", c.optim.embed);
  check_group("head", c.optim.head);
  check_group("scalar", c.optim.scalar);
  if (c.optim.scalar.kind != "adamw")
    fail("optim.scalar.kind must be adamw, got {} (Muon needs 2-D matrices)", c.optim.scalar.kind);
  if (!(c.optim.grad_clip >= 0)) fail("optim.grad_clip must be >= 0 (0 = off), got {}", c.optim.grad_clip);

  const TrainConfig& t = c.train;
  if (t.micro_batch <= 0) fail("train.micro_batch must be >= 1, got {}", t.micro_batch);
  if (t.batch_tokens <= 0) fail("train.batch_tokens must be >= 1, got {}", t.batch_tokens);
  int64_t micro_tokens = int64_t(t.micro_batch) * m.seq_len;
  if (t.batch_tokens % micro_tokens != 0)
    fail("train.batch_tokens ({}) must be a multiple of train.micro_batch * model.seq_len ({})", t.batch_tokens,
         micro_tokens);
  if (!(t.budget_seconds >= 0) || !std::isfinite(t.budget_seconds))
    fail("train.budget_seconds must be >= 0, got {}", t.budget_seconds);
  if (t.max_steps < 0) fail("train.max_steps must be >= 0 (0 = stop on the budget), got {}", t.max_steps);
  if (t.budget_seconds == 0 && t.max_steps == 0) fail("train.budget_seconds is 0 and train.max_steps is 0: nothing to train");
  auto frac = [](const char* name, float v) {
    if (!(v >= 0 && v <= 1)) fail("train.{} must be in [0, 1], got {}", name, v);
  };
  frac("warmup_frac", t.warmup_frac);
  frac("warmdown_frac", t.warmdown_frac);
  frac("final_lr_frac", t.final_lr_frac);
  frac("muon_momentum_warmup_frac", t.muon_momentum_warmup_frac);
  if (!(t.muon_momentum_start >= 0 && t.muon_momentum_start < 1))
    fail("train.muon_momentum_start must be in [0, 1), got {}", t.muon_momentum_start);
  if (t.warmup_frac + t.warmdown_frac > 1.0f + 1e-6f)
    fail("train.warmup_frac + train.warmdown_frac must be <= 1, got {} + {}", t.warmup_frac, t.warmdown_frac);
  if (t.warmdown_shape != "linear" && t.warmdown_shape != "sqrt")
    fail("train.warmdown_shape '{}' is unknown (linear, sqrt)", t.warmdown_shape);
  if (t.wd_schedule != "constant" && t.wd_schedule != "linear" && t.wd_schedule != "lr")
    fail("train.wd_schedule '{}' is unknown (constant, linear, lr)", t.wd_schedule);
  if (t.graph != "auto" && t.graph != "on" && t.graph != "off")
    fail("train.graph '{}' is unknown (auto, on, off)", t.graph);
  if (!(t.eval_every_seconds >= 0)) fail("train.eval_every_seconds must be >= 0, got {}", t.eval_every_seconds);
  if (t.val_tokens < 0) fail("train.val_tokens must be >= 0, got {}", t.val_tokens);
  if (t.periodic_val_tokens < 0) fail("train.periodic_val_tokens must be >= 0, got {}", t.periodic_val_tokens);
  if (t.eval_batch < 0) fail("train.eval_batch must be >= 0, got {}", t.eval_batch);
  if (!(t.checkpoint_every_seconds >= 0))
    fail("train.checkpoint_every_seconds must be >= 0, got {}", t.checkpoint_every_seconds);
  if (t.keep_checkpoints < 1) fail("train.keep_checkpoints must be >= 1, got {}", t.keep_checkpoints);
  if (t.log_every < 1) fail("train.log_every must be >= 1, got {}", t.log_every);
  if (t.threads < 0) fail("train.threads must be >= 0 (0 = all cores), got {}", t.threads);
  parse_seq_schedule(t.seq_schedule, m.seq_len);
  parse_batch_schedule(t.batch_schedule, t.batch_tokens, micro_tokens);
  if (c.name.empty()) fail("config name must not be empty");
}

namespace {

// One "N@FRAC" stage of a schedule text: N a positive integer of at most 12 digits, FRAC finite.
struct RawStage {
  int64_t n = 0;
  double until = 0;
  std::string frac_text;
};

// Splits "N@FRAC[,N@FRAC...]" into stages, calling bad(why) (which throws) on a malformed one.
template <class Bad>
std::vector<RawStage> split_stages(const std::string& text, const char* what, Bad&& bad) {
  std::vector<RawStage> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    const size_t at = item.find('@');
    if (at == std::string::npos) bad(fmt::format("stage '{}' has no '@'", item));
    const std::string n_s = item.substr(0, at), frac_s = item.substr(at + 1);
    if (n_s.empty() || n_s.size() > 12 || n_s.find_first_not_of("0123456789") != std::string::npos)
      bad(fmt::format("'{}' is not {}", n_s, what));
    char* end = nullptr;
    const double until = std::strtod(frac_s.c_str(), &end);
    if (frac_s.empty() || end != frac_s.c_str() + frac_s.size() || !std::isfinite(until))
      bad(fmt::format("'{}' is not a fraction", frac_s));
    if (!(until > 0 && until <= 1)) bad(fmt::format("fraction {} is outside (0, 1]", frac_s));
    RawStage st{std::stoll(n_s), until, frac_s};
    if (!out.empty() && (st.n <= out.back().n || st.until <= out.back().until))
      bad("sizes and fractions must increase from stage to stage");
    out.push_back(st);
    start = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<SeqStage> parse_seq_schedule(const std::string& text, int model_seq_len) {
  std::vector<SeqStage> stages;
  if (text.empty()) return stages;
  auto bad = [&](const std::string& why) {
    fail("train.seq_schedule '{}': {} (expected LEN@FRAC[,LEN@FRAC...], e.g. 256@0.5)", text, why);
  };
  for (const RawStage& r : split_stages(text, "a row length", bad)) {
    if (r.n < 1 || r.n >= model_seq_len || model_seq_len % r.n != 0)
      bad(fmt::format("row length {} must be shorter than model.seq_len {} and divide it", r.n, model_seq_len));
    stages.push_back({int(r.n), r.until});
  }
  return stages;
}

std::vector<BatchStage> parse_batch_schedule(const std::string& text, int64_t batch_tokens, int64_t micro_tokens) {
  std::vector<BatchStage> stages;
  if (text.empty()) return stages;
  auto bad = [&](const std::string& why) {
    fail("train.batch_schedule '{}': {} (expected TOKENS@FRAC[,TOKENS@FRAC...], e.g. 4096@0.5)", text, why);
  };
  for (const RawStage& r : split_stages(text, "a token count", bad)) {
    if (r.n < 1 || r.n >= batch_tokens || r.n % micro_tokens != 0)
      bad(fmt::format("{} tokens per step must be fewer than train.batch_tokens {} and a multiple of {} "
                      "(one micro-batch on every rank)",
                      r.n, batch_tokens, micro_tokens));
    stages.push_back({r.n, r.until});
  }
  return stages;
}

uint64_t config_hash(const RunConfig& cfg) {
  nlohmann::json j = to_json(cfg);
  j.erase("name");
  for (const char* k : {"budget_seconds", "max_steps", "eval_every_seconds", "val_tokens", "periodic_val_tokens",
                        "eval_batch", "checkpoint_every_seconds", "keep_checkpoints", "log_every", "threads", "graph"})
    j["train"].erase(k);
  // Keys added after checkpoints were first written count only when set, so a run that does not
  // use them keeps the hash it had before they existed (its checkpoints still resume).
  if (!cfg.model.smear) j["model"].erase("smear");
  if (cfg.train.warmdown_shape == "linear") j["train"].erase("warmdown_shape");
  std::string s = j.dump();  // nlohmann::json objects are sorted by key: a canonical text
  return fnv1a64(s.data(), s.size());
}

}  // namespace clm

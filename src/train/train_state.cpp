// TrainState to and from a checkpoint's metadata (see train_state.h and docs/CHECKPOINT.md).
#include "train/train_state.h"

#include "core/common.h"
#include "core/json_get.h"

namespace clm {

namespace {

const nlohmann::json& required(const nlohmann::json& j, const char* key, const std::string& what) {
  if (!j.contains(key)) fail("{}: the trainer state has no \"{}\"", what, key);
  return j.at(key);
}

double number(const nlohmann::json& v, const char* key, const std::string& what) {
  if (!v.is_number()) fail("{}: \"{}\" must be a number, got {}", what, key, json_text(v));
  return v.get<double>();
}

double number_or(const nlohmann::json& j, const char* key, double fallback, const std::string& what) {
  return j.contains(key) ? number(j.at(key), key, what) : fallback;
}

}  // namespace

nlohmann::json TrainState::to_json() const {
  nlohmann::json loader_array = nlohmann::json::array();
  for (const nlohmann::json& l : loaders) loader_array.push_back(l);
  return {{"step", step},
          {"tokens", tokens},
          {"budget_used", clock.used},
          {"budget_seconds", clock.budget},
          {"recent_step_seconds", clock.recent},
          {"loader", loaders.empty() ? nlohmann::json() : loaders.front()},
          {"loaders", loader_array},
          {"world", world},
          {"next_eval_at", next_eval_at},
          {"next_ckpt_at", next_ckpt_at},
          {"last_val", last_val},
          {"tokenizer_hash", tokenizer_hash},
          {"reason", reason},
          {"model_flops", model_flops}};
}

TrainState TrainState::from_json(const nlohmann::json& j, const TrainState& fallback, double flops_per_token,
                                 const std::string& what) {
  if (!j.is_object()) fail("{}: the trainer state is not a JSON object", what);
  TrainState s = fallback;
  s.step = json_int<int64_t>(required(j, "step", what), what + ": step");
  s.tokens = json_int<int64_t>(required(j, "tokens", what), what + ": tokens");
  s.model_flops = number_or(j, "model_flops", double(s.tokens) * flops_per_token, what);
  s.clock.used = number(required(j, "budget_used", what), "budget_used", what);
  s.clock.budget = number_or(j, "budget_seconds", fallback.clock.budget, what);
  s.clock.recent.clear();
  if (j.contains("recent_step_seconds")) {
    const nlohmann::json& r = j.at("recent_step_seconds");
    if (!r.is_array()) fail("{}: \"recent_step_seconds\" must be an array", what);
    for (const nlohmann::json& v : r) s.clock.recent.push_back(number(v, "recent_step_seconds", what));
  }
  s.next_eval_at = number_or(j, "next_eval_at", fallback.next_eval_at, what);
  s.next_ckpt_at = number_or(j, "next_ckpt_at", fallback.next_ckpt_at, what);
  s.last_val = j.value("last_val", nlohmann::json());
  s.world = j.contains("world") ? json_int<int>(j.at("world"), what + ": world") : 1;
  s.loaders.clear();
  if (j.contains("loaders")) {
    const nlohmann::json& l = j.at("loaders");
    if (!l.is_array() || l.empty()) fail("{}: \"loaders\" must be a non-empty array", what);
    for (const nlohmann::json& v : l) s.loaders.push_back(v);
  } else {
    s.loaders.push_back(required(j, "loader", what));
  }
  s.tokenizer_hash = j.contains("tokenizer_hash") ? json_str(j.at("tokenizer_hash"), what + ": tokenizer_hash")
                                                  : std::string();
  s.reason = j.contains("reason") ? json_str(j.at("reason"), what + ": reason") : std::string();
  return s;
}

}  // namespace clm

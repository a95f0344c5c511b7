// The CUDA attention implementation's selection rules (attention_select.h).
#include "backend/cuda/attention_select.h"

#include <cstdlib>

#include "core/common.h"

namespace clm::cuda {

const char* attention_impl_name(AttnImpl impl) {
  switch (impl) {
    case AttnImpl::Fp32: return "fp32";
    case AttnImpl::Gemm: return "gemm";
    default: return "cudnn";
  }
}

const char* attention_mode_name(AttnMode mode) {
  switch (mode) {
    case AttnMode::Auto: return "auto";
    case AttnMode::Fp32: return "fp32";
    case AttnMode::Gemm: return "gemm";
    default: return "cudnn";
  }
}

AttnMode parse_attention_mode(const std::string& text, const std::string& origin) {
  if (text == "auto") return AttnMode::Auto;
  if (text == "fp32") return AttnMode::Fp32;
  if (text == "gemm") return AttnMode::Gemm;
  if (text == "cudnn") return AttnMode::Cudnn;
  fail("{}: CUDA attention '{}' is unknown (auto | fp32 | gemm | cudnn)", origin, text);
}

AttnMode attention_mode_from_env() {
  const char* v = std::getenv("CLOCKLM_CUDA_ATTENTION");
  if (!v || !*v) return AttnMode::Auto;
  return parse_attention_mode(v, "CLOCKLM_CUDA_ATTENTION");
}

AttnImpl fastest_attention(const std::vector<AttnTiming>& timed) {
  if (timed.empty()) fail("fastest_attention: nothing was timed");
  AttnTiming best = timed.front();
  for (const AttnTiming& t : timed)
    if (t.seconds < 0.9 * best.seconds) best = t;
  return best.impl;
}

AttnImpl faster_attention(double fp32_seconds, double gemm_seconds) {
  return fastest_attention({{AttnImpl::Fp32, fp32_seconds}, {AttnImpl::Gemm, gemm_seconds}});
}

std::optional<AttnImpl> AttnChoices::find(const AttnShape& s) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = picked_.find(s.key());
  if (it == picked_.end()) return std::nullopt;
  return it->second;
}

void AttnChoices::record(const AttnShape& s, AttnImpl impl) {
  std::lock_guard<std::mutex> lock(mu_);
  picked_[s.key()] = impl;
}

std::string AttnChoices::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n[2][3] = {};  // [backward][AttnImpl]
  for (const auto& [key, impl] : picked_) ++n[std::get<0>(key)][int(impl)];
  const AttnImpl order[3] = {AttnImpl::Cudnn, AttnImpl::Gemm, AttnImpl::Fp32};
  std::string out;
  for (int bwd = 0; bwd < 2; ++bwd) {
    std::string pass;
    for (AttnImpl impl : order)
      if (const int c = n[bwd][int(impl)])
        pass += fmt::format("{} {} {}", pass.empty() ? "" : ",", attention_impl_name(impl), c);
    if (!pass.empty()) out += (out.empty() ? "" : "; ") + std::string(bwd ? "bwd" : "fwd") + pass;
  }
  return out.empty() ? "none timed yet" : out;
}

}  // namespace clm::cuda

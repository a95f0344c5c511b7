// The CUDA attention implementation's selection rules (attention_select.h).
#include "backend/cuda/attention_select.h"

#include <cstdlib>

#include "core/common.h"

namespace clm::cuda {

const char* attention_impl_name(AttnImpl impl) { return impl == AttnImpl::Fp32 ? "fp32" : "gemm"; }

const char* attention_mode_name(AttnMode mode) {
  return mode == AttnMode::Auto ? "auto" : mode == AttnMode::Fp32 ? "fp32" : "gemm";
}

AttnMode parse_attention_mode(const std::string& text, const std::string& origin) {
  if (text == "auto") return AttnMode::Auto;
  if (text == "fp32") return AttnMode::Fp32;
  if (text == "gemm") return AttnMode::Gemm;
  fail("{}: CUDA attention '{}' is unknown (auto | fp32 | gemm)", origin, text);
}

AttnMode attention_mode_from_env() {
  const char* v = std::getenv("CLOCKLM_CUDA_ATTENTION");
  if (!v || !*v) return AttnMode::Auto;
  return parse_attention_mode(v, "CLOCKLM_CUDA_ATTENTION");
}

AttnImpl faster_attention(double fp32_seconds, double gemm_seconds) {
  return gemm_seconds < 0.9 * fp32_seconds ? AttnImpl::Gemm : AttnImpl::Fp32;
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
  int n[2][2] = {};  // [backward][gemm]
  for (const auto& [key, impl] : picked_) ++n[std::get<0>(key)][impl == AttnImpl::Gemm];
  std::string out;
  for (int bwd = 0; bwd < 2; ++bwd) {
    if (n[bwd][0] + n[bwd][1] == 0) continue;
    std::string pass = bwd ? "bwd" : "fwd";
    if (n[bwd][1]) pass += fmt::format(" gemm {}", n[bwd][1]);
    if (n[bwd][0]) pass += fmt::format("{} fp32 {}", n[bwd][1] ? "," : "", n[bwd][0]);
    out += (out.empty() ? "" : "; ") + pass;
  }
  return out.empty() ? "none timed yet" : out;
}

}  // namespace clm::cuda

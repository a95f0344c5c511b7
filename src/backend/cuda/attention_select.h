// Which CUDA attention implementation runs: the fp32 tiles of attention.cu, the bf16 tensor-core
// GEMMs of attention_gemm.cu or cuDNN's fused flash attention (attention_cudnn.h).
// CLOCKLM_CUDA_ATTENTION = auto | fp32 | gemm | cudnn (unset: auto) picks one for the process;
// under auto the backend times every implementation that serves a shape on its first call and
// keeps the fastest (AttnChoices caches the decisions, like cuDNN's benchmark mode). Plain C++ with
// no CUDA, so the rules are tested on any machine.
#pragma once
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace clm::cuda {

enum class AttnImpl { Fp32, Gemm, Cudnn };
enum class AttnMode { Auto, Fp32, Gemm, Cudnn };

const char* attention_impl_name(AttnImpl impl);  // "fp32" | "gemm" | "cudnn"
const char* attention_mode_name(AttnMode mode);  // "auto" | "fp32" | "gemm" | "cudnn"
// "auto" | "fp32" | "gemm" | "cudnn"; anything else is an Error naming `origin` (where the text
// came from).
AttnMode parse_attention_mode(const std::string& text, const std::string& origin);
// CLOCKLM_CUDA_ATTENTION, auto when unset or empty.
AttnMode attention_mode_from_env();

// Auto's rule on measured seconds, over the implementations timed in the order fp32, gemm, cudnn
// (those that serve the shape): a later one replaces the pick so far only when it is at least 10%
// faster, so a near tie keeps the earlier (the deterministic fp32 and gemm before cuDNN) instead of
// flipping between runs on timing noise.
struct AttnTiming {
  AttnImpl impl;
  double seconds;
};
AttnImpl fastest_attention(const std::vector<AttnTiming>& timed);
AttnImpl faster_attention(double fp32_seconds, double gemm_seconds);  // of fp32 and gemm

// One attention call's shape, forward or backward (backward: Tq == Tk == Tk_cap == T).
struct AttnShape {
  bool backward = false;
  int B = 0, H = 0, Hkv = 0, Tq = 0, Tk = 0, Tk_cap = 0, hd = 0, window = 0;
  auto key() const { return std::make_tuple(backward, B, H, Hkv, Tq, Tk, Tk_cap, hd, window); }
};

// Auto's decisions per shape; safe to share between threads.
class AttnChoices {
 public:
  std::optional<AttnImpl> find(const AttnShape& s) const;
  void record(const AttnShape& s, AttnImpl impl);
  // "fwd cudnn 1, gemm 2, fp32 1; bwd gemm 1": how many shapes each pass runs on each
  // implementation ("none timed yet" when empty).
  std::string summary() const;

 private:
  mutable std::mutex mu_;
  std::map<decltype(AttnShape{}.key()), AttnImpl> picked_;
};

}  // namespace clm::cuda

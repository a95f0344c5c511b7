// The GPT model on any backend: parameters, gradients and activations carved out of a few large
// device allocations; every layer a visible forward/backward pair of backend ops (backend/backend.h).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/layout.h"
#include "backend/backend.h"

namespace clm {

struct Profiler;  // core/profiler.h; nullptr = profiling off

struct Param {
  std::string name;            // e.g. "blocks.3.attn.wq"
  std::vector<int64_t> shape;  // row-major
  ParamKind kind;
  float* data = nullptr;       // fp32 master weights: device pointer into the params allocation
  float* grad = nullptr;       // fp32 gradient: device pointer into the grads allocation
  Backend* backend = nullptr;  // the device both live on
  int64_t numel() const;
  void to_host(float* dst) const;       // numel() floats
  void from_host(const float* src);     // the caller then tells the model (GPT::weights_changed)
  void grad_to_host(float* dst) const;
};

// A run of packed tokens that attends as one causal sequence (inference with a KV cache): tokens
// [off, off + n) sit at positions pos0.. and see the keys cached at [0, pos0) of their cache area
// plus their own. The area starts `cache` floats into each layer's K/V buffer and holds ldT
// positions per kv head ([Hkv, ldT, hd]).
struct KVSegment {
  int64_t off = 0;
  int n = 0, pos0 = 0;
  int64_t cache = 0;
  int ldT = 0;
  // The token at position pos0 - 1 (read when pos0 > 0 and the model has a bigram embedding,
  // model.bigram_buckets, whose first row of the segment pairs it with that token, or token
  // smearing, model.smear, which mixes in its embedding).
  int32_t prev = -1;
};

// Keys and values of past positions, on the model's device: `floats` floats of K and of V per layer,
// or one K/V pair that every layer shares (for forwards that are complete in themselves, as in
// scoring: each layer then overwrites the previous layer's keys after using them). It also holds the
// final-norm hidden states of the last forward_cached that used it, which the head reads, so two
// caches on one model never see each other's results.
class KVCache {
 public:
  KVCache(Backend& be, int n_layer, int64_t floats, bool shared_layers);
  void reserve(int64_t floats);  // grows (contents are lost)
  int64_t floats() const { return floats_; }
  float* k(int layer) const;
  float* v(int layer) const;
  void* hidden_for(int64_t rows, size_t row_bytes);  // (re)sizes the hidden-state rows
  const void* hidden() const { return hidden_.as<void>(); }
  int64_t hidden_rows() const { return hidden_rows_; }

 private:
  Backend* be_;
  int n_layer_;
  bool shared_;
  int64_t floats_ = 0;
  DeviceBuffer k_, v_, hidden_;
  int64_t hidden_rows_ = 0;
};

struct GPTImpl;
struct GPT {
  // Allocates params, grads and activations on `be`; the matmul precision comes from
  // cfg.matmul_precision (auto: bf16 where the device multiplies bf16 natively, else fp32).
  GPT(const ModelConfig& cfg, int max_B, int max_T, Backend& be = cpu_backend());
  // Bytes the constructor would allocate on `be` (weights, gradients, bf16 mirror, activations),
  // computed from the layout alone (model/layout.h); the constructor refuses a model that does not
  // fit the device. Both refuse a config validate(ModelConfig) refuses, or one without a vocabulary.
  static size_t memory_need(const ModelConfig& cfg, int max_B, int max_T, Backend& be);
  ~GPT();
  GPT(GPT&&) noexcept;
  GPT& operator=(GPT&&) noexcept;

  void init_weights(uint64_t seed);
  // Training/eval forward over B rows of T tokens (T <= max_T and B*T <= max_B*max_T). Returns the mean cross-entropy (nats) over
  // targets >= 0 (a target < 0 is ignored). Optional outputs, each B*T: per-token loss in nats
  // (0 where ignored) and the argmax prediction at each position. Keeps what backward needs.
  // With model.mtp_weight > 0 and gradients enabled it also runs the multi-token head (the token
  // after next) and its gradient; the value returned stays the next-token loss (aux_losses() has
  // the other), and backward() follows next-token loss + mtp_weight x mtp_loss.
  float forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                float* token_loss = nullptr, int32_t* argmax = nullptr);
  // forward() with nothing read back from the device (training: every step's read is one, at its
  // end). Targets are required; sums_d (2 device doubles, zeroed here) accumulates the summed
  // next-token loss in [0] and the multi-token head's in [1] (0 without it). loss_means() turns
  // them, once on the host, into forward()'s values; backward() may follow at once.
  struct LossCounts {
    int64_t valid = 0, mtp_valid = 0;  // targets >= 0 of each head (the means' divisors)
  };
  LossCounts forward_deferred(const int32_t* inputs, const int32_t* targets, int B, int T, double* sums_d);
  // forward_deferred in two halves, so that a training step can be recorded and replayed
  // (Backend::record): stage_batch checks micro-batch `slot`'s tokens and targets and copies them,
  // with what the host derives from them (bigram rows, the token after next), to that slot's
  // device arrays; forward_staged then queues the slot's forward with nothing moved between host
  // and device. A step's slots share one B x T (slot 0's); they are allocated on first use.
  LossCounts stage_batch(int64_t slot, const int32_t* inputs, const int32_t* targets, int B, int T);
  void forward_staged(int64_t slot, const LossCounts& c, double* sums_d);
  // Advances whenever a device buffer that a training step's ops use is allocated anew (slots,
  // step scalars, the gradient accumulator): ops recorded before then must be recorded again.
  uint64_t memory_epoch() const;
  // {next-token mean loss, multi-token mean loss} from a deferred forward's two sums, exactly as
  // forward() and aux_losses() report them.
  static std::pair<float, float> loss_means(const double* sums, const LossCounts& c);
  // At least n device doubles kept by the model for the caller's per-step scalars (train_step's
  // loss sums and gradient clip; forward()'s sums); grown on demand, so valid until the next call.
  double* step_scalars(int64_t n);
  // The auxiliary losses of the last forward, by name, to report next to its loss. The names depend
  // on the config alone (so every rank lists the same): "mtp_loss" when model.mtp_weight > 0, the
  // mean cross-entropy (nats) of the multi-token head over the positions whose token after next is
  // known (0 when the last forward did not run that head: gradients disabled or no targets).
  std::vector<std::pair<std::string, double>> aux_losses() const;
  // Backward of the last forward; ADDS into grads, scaled by `loss_scale` (1/accum_steps).
  void backward(float loss_scale = 1.0f);
  void zero_grad();
  // Full logits for the last position of each row (B*padded_vocab, softcapped), for sampling.
  void last_logits(const int32_t* inputs, int B, int T, float* out);

  // ---- inference with a KV cache: the same blocks as forward(), driven by eval/kv_decode.h ----
  // N packed tokens in segments (covering all N); each segment's keys/values are written into its
  // cache area before its queries attend over it. Positions must be < max_pos (RoPE tables). Keeps
  // the final-norm hidden states of these N tokens in `cache` for cached_logits/cached_score; no
  // backward follows.
  void forward_cached(const int32_t* tokens, int64_t N, const std::vector<KVSegment>& segs, KVCache& cache,
                      int max_pos);
  // Softcapped logits of the listed rows of the last forward_cached: out[n * padded_vocab] (host),
  // padding columns -inf.
  void cached_logits(const KVCache& cache, const int64_t* rows, int64_t n, float* out);
  // Loss (nats) and argmax at the rows of the last forward_cached whose target is >= 0 (0 / -1
  // elsewhere); the head matmul runs only on those rows. Host arrays of that forward's N.
  void cached_score(const KVCache& cache, const int32_t* targets, float* loss, int32_t* argmax);

  std::vector<Param>& params();
  // The one gradient allocation every Param::grad points into (grad_floats() floats), reduced
  // whole across ranks; and a second one of the same size, allocated at first use, where
  // train_step sums the gradients of its micro-batches.
  float* grad_buffer();
  int64_t grad_floats() const;
  float* grad_accumulator();
  int64_t num_params() const;
  double flops_per_token(int T) const;  // training FLOPs (fwd+bwd) per token incl. attention
  const ModelConfig& config() const;
  void set_profiler(Profiler* p);

  // ---- device, precision and evaluation switches (docs/MODEL.md) ----
  Backend& backend() const;
  // Matmul precision: BF16 (bf16 inputs, fp32 accumulation) or F32; set from the config at
  // construction, changed here by gradient checks.
  void set_matmul_precision(MatPrec p);
  MatPrec matmul_precision() const;
  // With gradients disabled, forward skips the fused head backward (use for evaluation; 3x less
  // head work). backward() then refuses to run. Default: enabled.
  void set_grad_enabled(bool on);
  // Tell the model its fp32 weights were modified in place outside init_weights/zero_grad/backward
  // (e.g. loaded from a checkpoint after a forward), so the bf16 copy is refreshed.
  void weights_changed();

  GPTImpl* impl = nullptr;
};

}  // namespace clm

// Optimizer hyper-parameters: one OptimGroup per parameter group (matrix, embed, head, scalar).
// Loaded and validated with the rest of the run configuration (config/config.h).
#pragma once
#include <string>

namespace clm {

struct OptimGroup {            // hyper-parameters of one parameter group
  std::string kind = "adamw";  // adamw | muon | normuon (Muon with per-row second moments)
  float lr = 0.0f;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float momentum = 0.95f;      // muon
  bool nesterov = true;        // muon
  int ns_steps = 5;            // muon Newton-Schulz iterations
  // muon: Newton-Schulz coefficients, quintic (Muon's, the same every step) | polar (Polar
  // Express: per-step coefficients that orthogonalise further in the same steps)
  std::string ns_coeffs = "quintic";
  float weight_decay = 0.0f;
  // Cautious weight decay: decay only the elements whose update already moves them towards zero
  // (update and parameter of the same sign), so the decay never works against the gradient.
  bool cautious_wd = false;
  // muon: Newton-Schulz matmul inputs, auto | bf16 | fp32 (fp32 accumulation either way); auto
  // follows the device as model.matmul_precision does.
  std::string ns_precision = "auto";
};

// Defaults are those of baseline-50m (d_model 512); presets rescale the AdamW learning rates.
struct OptimConfig {
  OptimGroup matrix{.kind = "muon", .lr = 0.02f};                      // 2-D hidden matrices
  OptimGroup embed{.kind = "adamw", .lr = 0.245f, .beta1 = 0.8f, .eps = 1e-10f};     // token embedding
  OptimGroup head{.kind = "adamw", .lr = 0.0049f, .beta1 = 0.8f, .eps = 1e-10f};    // output head
  OptimGroup scalar{.kind = "adamw", .lr = 0.02f, .beta1 = 0.8f, .eps = 1e-10f};   // gains, scalars
  float grad_clip = 1.0f;  // 0 = off
  // With several ranks: each rank keeps the optimizer state of its own share of the parameters and
  // updates only those (ZeRO-1; Muon's Newton-Schulz runs once per matrix, on its owner), then the
  // updated parameters are gathered. false: every rank runs the whole optimizer.
  bool shard_state = true;
};

}  // namespace clm

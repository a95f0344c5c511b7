// Subcommands of the engine area: `model` (parameter count and FLOPs of a config) and `train` (the
// budgeted training loop, src/train/).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/common.h"
#include "model/config.h"

namespace clm {

namespace {

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), out;
  int n = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (n && n % 3 == 0 && *it != '-') out.push_back(',');
    out.push_back(*it);
    ++n;
  }
  return {out.rbegin(), out.rend()};
}

// Training FLOPs per token: 6 per matmul weight (fwd 2 + bwd 4) plus causal-free attention scores
// and values, 12 * n_layer * n_head * head_dim * T (the usual convention, as in PaLM and nanochat).
double analytic_flops_per_token(const ModelConfig& m, int T) {
  ParamCount p = count_params(m);
  double mm = double(p.matrix + (m.tie_embeddings ? p.embed : p.head));
  return 6.0 * mm + 12.0 * m.n_layer * m.n_head * m.head_dim * double(T);
}

}  // namespace

void register_engine_commands(CLI::App& app) {
  // ---- model ----
  {
    auto* cmd = app.add_subcommand("model", "Print a config's parameter count (by group) and FLOPs per token");
    auto config = std::make_shared<std::string>();
    auto sets = std::make_shared<std::vector<std::string>>();
    auto json_out = std::make_shared<bool>(false);
    cmd->add_option("--config", *config, "Preset name or JSON config file")->required();
    cmd->add_option("--set", *sets, "Override a config key: key=value (repeatable)");
    cmd->add_flag("--json", *json_out, "Print the resolved config as JSON as well");
    cmd->callback([config, sets, json_out] {
      RunConfig c = load_config(*config, *sets);
      const ModelConfig& m = c.model;
      ParamCount p = count_params(m);
      if (m.vocab_size == 0)
        std::printf("note: vocab_size 0 (taken from the dataset's tokenizer); counts below exclude embed/head\n");
      std::printf("config: %s\n", c.name.c_str());
      std::printf("model: %d layers x d_model %d, %d heads (%d kv) x head_dim %d, mlp %s x%.3g, vocab %d (padded %d), "
                  "seq %d, %s embeddings\n",
                  m.n_layer, m.d_model, m.n_head, m.n_kv_head, m.head_dim, m.activation.c_str(), m.mlp_ratio,
                  m.vocab_size, m.padded_vocab(), m.seq_len, m.tie_embeddings ? "tied" : "untied");
      std::printf("parameters: %s total\n", with_commas(p.total()).c_str());
      std::printf("  matrix (%s): %s\n", c.optim.matrix.kind.c_str(), with_commas(p.matrix).c_str());
      std::printf("  embed  (%s): %s\n", c.optim.embed.kind.c_str(), with_commas(p.embed).c_str());
      std::printf("  head   (%s): %s\n", c.optim.head.kind.c_str(), with_commas(p.head).c_str());
      std::printf("  scalar (%s): %s\n", c.optim.scalar.kind.c_str(), with_commas(p.scalar).c_str());
      double f = analytic_flops_per_token(m, m.seq_len);
      std::printf("training FLOPs per token (T=%d): %.4g (%.3f GFLOP)\n", m.seq_len, f, f / 1e9);
      std::printf("training FLOPs per step (%lld tokens): %.4g\n", (long long)c.train.batch_tokens,
                  f * double(c.train.batch_tokens));
      if (*json_out) std::printf("%s\n", to_json(c).dump(2).c_str());
    });
  }
}

}  // namespace clm

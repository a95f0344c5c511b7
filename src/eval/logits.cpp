// Full logits of token rows (see logits.h).
#include "eval/logits.h"

#include <algorithm>
#include <sstream>

#include "core/common.h"
#include "model/gpt.h"

namespace clm {

std::vector<std::vector<int32_t>> read_token_rows(const std::string& path) {
  const std::string text = read_file(path);
  std::istringstream in(text);
  std::vector<std::vector<int32_t>> rows;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    std::istringstream ls(line);
    std::vector<int32_t> row;
    std::string tok;
    while (ls >> tok) {
      size_t used = 0;
      long long v = -1;
      try {
        v = std::stoll(tok, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != tok.size() || v < 0 || v > INT32_MAX) fail("{}:{}: '{}' is not a token id", path, lineno, tok);
      row.push_back(int32_t(v));
    }
    if (row.empty()) continue;
    if (!rows.empty() && row.size() != rows[0].size())
      fail("{}:{}: a row of {} tokens, the first row has {}", path, lineno, row.size(), rows[0].size());
    rows.push_back(std::move(row));
  }
  if (rows.empty()) fail("{}: no token rows", path);
  return rows;
}

std::vector<float> row_logits(GPT& model, const std::vector<std::vector<int32_t>>& rows) {
  const ModelConfig& c = model.config();
  const int T = int(rows.at(0).size());
  const int64_t V = c.vocab_size, Vp = c.padded_vocab();
  const int64_t kv = int64_t(c.n_kv_head) * T * c.head_dim;  // one row's cache area
  std::vector<float> out;
  out.reserve(size_t(rows.size()) * T * V);
  KVCache cache(model.backend(), c.n_layer, kv, true);  // each forward is complete in itself
  std::vector<int64_t> at(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) at[size_t(t)] = t;
  std::vector<float> full(size_t(T) * Vp);
  for (const std::vector<int32_t>& row : rows) {
    KVSegment seg;
    seg.n = T;
    seg.ldT = T;
    model.forward_cached(row.data(), T, {seg}, cache, T);
    model.cached_logits(cache, at.data(), T, full.data());
    for (int t = 0; t < T; ++t) out.insert(out.end(), full.begin() + t * Vp, full.begin() + t * Vp + V);
  }
  return out;
}

}  // namespace clm

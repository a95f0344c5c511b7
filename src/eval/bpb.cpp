// Bits per byte: the arithmetic and the evaluation loop over a batch source, independent of the
// model and the data files (eval_bpb for a GPT and a dataset folder is in bpb_gpt.cpp).
#include "eval/bpb.h"

#include <cmath>
#include <memory>

#include "core/common.h"
#include "core/progress.h"
#include "dist/comm.h"
#include "eval/finite_output.h"

namespace clm {

const char* const kBpbDefinition =
    "bpb = sum of target cross-entropy (nats) / (ln 2 * sum of target byte lengths); targets are the "
    "first val_tokens target positions of the val split in loader order (rows of T+1 tokens, no "
    "shuffle); special-token targets (BOS) are excluded from both sums; byte lengths from the "
    "tokenizer's token_bytes";

nlohmann::json BpbResult::to_json() const {
  return {{"bpb", bpb}, {"nats", nats}, {"tokens", tokens}, {"bytes", bytes}, {"positions", positions},
          {"val_tokens", val_tokens}, {"seq_len", T}, {"seconds", seconds},
          {"bytes_per_token", tokens > 0 ? (double)bytes / tokens : 0.0}, {"definition", kBpbDefinition}};
}

void bpb_accumulate(BpbResult& r, const int32_t* targets, const float* token_loss, int64_t n,
                    const std::vector<uint32_t>& token_bytes) {
  double nats = 0;
  int64_t tokens = 0, bytes = 0, positions = 0;
  for (int64_t i = 0; i < n; i++) {
    int32_t t = targets[i];
    if (t < 0) continue;
    positions++;
    if ((size_t)t >= token_bytes.size()) fail("bpb: target id {} outside the tokenizer's {} ids", t, token_bytes.size());
    uint32_t nb = token_bytes[t];
    if (nb == 0) continue;  // special token (BOS): not text, excluded from both sums
    require_finite_output(token_loss[i], "bpb", "target loss");
    nats += token_loss[i];
    tokens++;
    bytes += nb;
  }
  r.nats += nats;
  r.tokens += tokens;
  r.bytes += bytes;
  r.positions += positions;
}

void bpb_finalize(BpbResult& r) {
  if (r.bytes <= 0) fail("bpb: no counted target bytes (empty or all-special validation text)");
  r.bpb = r.nats / (std::log(2.0) * (double)r.bytes);
}

BpbResult eval_bpb(const BpbBatchSource& next, const BpbScorer& score, const std::vector<uint32_t>& token_bytes,
                   int64_t val_tokens, int B, int T, std::FILE* progress, Comm* comm) {
  if (val_tokens <= 0) fail("bpb: val_tokens must be positive (got {})", val_tokens);
  if (B <= 0 || T <= 0) fail("bpb: bad batch shape B={} T={}", B, T);
  double t0 = now_seconds();
  BpbResult r;
  r.val_tokens = val_tokens;
  r.T = T;
  std::vector<int32_t> inputs((size_t)B * T), targets((size_t)B * T);
  std::vector<float> loss((size_t)B * T);
  int64_t visited = 0;
  std::unique_ptr<Progress> bar;
  if (progress) bar = std::make_unique<Progress>("bpb", double(val_tokens), progress);
  const int world = comm ? comm->world() : 1, rank = comm ? comm->rank() : 0;
  std::vector<double> parts;  // with several ranks: nats, tokens, bytes, positions of each batch
  for (int64_t batch = 0; visited < val_tokens; ++batch) {
    // A split shorter than val_tokens is scored whole: the result is exact over all of it, and
    // `positions` < `val_tokens` in the result says so.
    if (!next(inputs.data(), targets.data())) break;
    int64_t want = std::min<int64_t>((int64_t)B * T, val_tokens - visited);
    int rows = (int)((want + T - 1) / T);  // only the rows that hold counted positions are scored
    for (int64_t i = want; i < (int64_t)rows * T; i++) targets[i] = -1;
    visited += want;
    if (world > 1) {
      parts.resize(parts.size() + 4, 0.0);
      if (batch % world != rank) continue;
      BpbResult b;
      double* p = parts.data() + parts.size() - 4;
      try {
        score(inputs.data(), targets.data(), rows, T, loss.data());
        bpb_accumulate(b, targets.data(), loss.data(), (int64_t)rows * T, token_bytes);
      } catch (const Error&) {
        // A non-finite loss on one rank must fail every rank, after the exchange below.
        b.nats = NAN;
      }
      p[0] = b.nats, p[1] = double(b.tokens), p[2] = double(b.bytes), p[3] = double(b.positions);
    } else {
      score(inputs.data(), targets.data(), rows, T, loss.data());
      bpb_accumulate(r, targets.data(), loss.data(), (int64_t)rows * T, token_bytes);
    }
    if (bar) {
      double dt = now_seconds() - t0;
      bar->update(double(visited), fmt::format("{} of {} tokens | {:.0f} tok/s", visited, val_tokens,
                                               dt > 0 ? double(visited) / dt : 0.0));
    }
  }
  if (world > 1) {
    comm->all_reduce(parts.data(), int64_t(parts.size()), ReduceOp::Sum);
    for (size_t i = 0; i < parts.size(); i += 4) {
      r.nats += parts[i];
      r.tokens += int64_t(parts[i + 1]);
      r.bytes += int64_t(parts[i + 2]);
      r.positions += int64_t(parts[i + 3]);
    }
    if (!std::isfinite(r.nats)) throw NonFiniteError("bpb: the validation loss is not finite on some rank");
  }
  // positions counts non-negative targets: it equals visited unless a source padded its last batch.
  bpb_finalize(r);
  r.seconds = now_seconds() - t0;
  if (bar)
    bar->finish(fmt::format("val bpb {:.4f} over {} tokens{} in {:.1f}s", r.bpb, r.positions,
                            r.positions < val_tokens ? " (the whole val split)" : "", r.seconds));
  return r;
}

}  // namespace clm

// Fuzz target: a checkpoint file's bytes through parse_checkpoint (header sizes, metadata),
// checkpoint_config (the config that would size the model) and parse_optim_state (the optimizer
// table). The trailing checksum is recomputed first, so mutations reach the checks behind it.
#include <cstring>
#include <string>

#include "checkpoint/checkpoint.h"
#include "fuzz/fuzz_util.h"
#include "optim/optim_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  std::string blob(fuzz::text_of(data, size));
  if (blob.size() >= 8) {
    uint64_t sum = checkpoint_checksum(blob.data(), blob.size() - 8);
    std::memcpy(blob.data() + blob.size() - 8, &sum, 8);
  }
  fuzz::errors_only([&] {
    CheckpointView v = parse_checkpoint(blob, "step.ckpt");
    fuzz::require(kCheckpointHeaderBytes + v.weights.size() + v.optim.size() + 8 <= blob.size(),
                  "sections lie inside the file");
    fuzz::errors_only([&] {
      OptimStateTable t = parse_optim_state(v.optim);
      for (const OptimStateEntry& e : t.params)
        fuzz::require(e.m.size() == 4 * e.n && e.v.size() == (e.muon ? 0 : 4 * e.n),
                      "moment sizes");
    });
    RunConfig cfg = checkpoint_config(v.meta, v.weights.size(), "step.ckpt");
    fuzz::require(cfg.model.vocab_size > 0, "a checkpoint's model has a vocabulary");
  });
  return 0;
}

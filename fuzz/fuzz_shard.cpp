// Fuzz target: a token shard's bytes (header and tokens) through parse_shard_header, the check
// Shard::open runs on the mapped file. A header that passes must describe exactly the bytes given.
#include <cstring>

#include "data/dataset.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace clm;
  fuzz::errors_only([&] {
    ShardHeader h = parse_shard_header(data, size, "shard.bin");
    fuzz::require(h.width == 2 || h.width == 4, "width is 2 or 4");
    fuzz::require(kShardHeaderBytes + h.n_tokens * h.width == size, "tokens fill the file exactly");
    uint64_t sum = 0;  // every token is readable where the header says it is (ASan checks)
    for (uint64_t i = 0; i < h.n_tokens; ++i) {
      uint32_t v = 0;
      std::memcpy(&v, data + kShardHeaderBytes + i * h.width, h.width);
      sum += v;
    }
    fuzz::require(sum <= h.n_tokens * uint64_t(UINT32_MAX), "token sum");
  });
  return 0;
}

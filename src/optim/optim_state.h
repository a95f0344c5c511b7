// The optimizer-state bytes a checkpoint stores (layout in docs/CHECKPOINT.md), parsed without a
// model or a device: Optimizer::load matches the table against its parameters, and tools and the
// fuzz targets can read it alone.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace clm {

inline constexpr char kOptimStateMagic[8] = {'C', 'L', 'M', 'O', 'P', 'T', '1', '\0'};

struct OptimStateEntry {
  std::string name;
  bool muon = false;
  uint64_t n = 0;         // elements
  std::string_view m, v;  // 4n bytes each (v empty for Muon), pointing into the parsed bytes
};
struct OptimStateTable {
  int64_t steps[4] = {0, 0, 0, 0};  // matrix, embed, head, scalar
  std::vector<OptimStateEntry> params;
};

// Every count and size is checked against the bytes that remain before it is used, and the table
// must end exactly at the end of `bytes`. Throws Error with a one-line message.
OptimStateTable parse_optim_state(std::string_view bytes);

}  // namespace clm

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
  bool muon = false;      // Muon or NorMuon
  bool normuon = false;
  uint64_t n = 0;         // elements
  // m: 4n bytes; v: 4n bytes for AdamW, empty for Muon, 4 rows bytes for NorMuon; both point into
  // the parsed bytes.
  std::string_view m, v;
};
struct OptimStateTable {
  int64_t steps[4] = {0, 0, 0, 0};  // matrix, embed, head, scalar
  std::vector<OptimStateEntry> params;
};

// Every count and size is checked against the bytes that remain before it is used, and the table
// must end exactly at the end of `bytes`. Throws Error with a one-line message.
OptimStateTable parse_optim_state(std::string_view bytes);

}  // namespace clm

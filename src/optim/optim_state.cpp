// Parsing the optimizer-state bytes of a checkpoint (see optim_state.h): a cursor that refuses to
// read past the end, so a corrupt count or size fails with a message instead of reading or
// allocating what is not there.
#include "optim/optim_state.h"

#include <cstring>

#include "core/common.h"

namespace clm {

namespace {

struct Cursor {
  std::string_view s;
  size_t pos = 0;
  std::string_view take(uint64_t n, const char* what) {
    if (n > s.size() - pos) fail("optimizer state truncated (reading {})", what);
    std::string_view out = s.substr(pos, size_t(n));
    pos += size_t(n);
    return out;
  }
  template <typename T>
  T get(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what).data(), sizeof(T));
    return v;
  }
};

}  // namespace

OptimStateTable parse_optim_state(std::string_view bytes) {
  Cursor c{bytes};
  if (std::memcmp(c.take(8, "magic").data(), kOptimStateMagic, 8) != 0)
    fail("optimizer state has a bad magic (not a clocklm optimizer state)");
  uint32_t np = c.get<uint32_t>("parameter count");
  OptimStateTable t;
  for (int64_t& st : t.steps) st = c.get<int64_t>("step counts");
  for (int64_t st : t.steps)
    if (st < 0) fail("optimizer state is corrupt (negative step count {})", st);
  // Each entry takes at least 13 bytes, which bounds the count before anything is reserved.
  if (np > (bytes.size() - c.pos) / 13)
    fail("optimizer state is corrupt ({} parameters in {} bytes)", np, bytes.size());
  t.params.reserve(np);
  for (uint32_t i = 0; i < np; ++i) {
    OptimStateEntry e;
    uint32_t len = c.get<uint32_t>("name length");
    if (len > 4096) fail("optimizer state is corrupt (name length {})", len);
    e.name = std::string(c.take(len, "name"));
    uint8_t kind = c.get<uint8_t>("kind");
    if (kind > 2) fail("optimizer state for '{}' is corrupt (kind {})", e.name, kind);
    e.muon = kind >= 1;
    e.normuon = kind == 2;
    e.n = c.get<uint64_t>("size");
    if (e.n > (bytes.size() - c.pos) / 4) fail("optimizer state truncated (reading {})", e.name);
    e.m = c.take(4 * e.n, e.name.c_str());
    if (!e.muon) e.v = c.take(4 * e.n, e.name.c_str());
    if (e.normuon) {
      const uint64_t rows = c.get<uint64_t>("rows");
      if (rows == 0 || rows > e.n || e.n % rows != 0)
        fail("optimizer state for '{}' is corrupt ({} rows of {} elements)", e.name, rows, e.n);
      e.v = c.take(4 * rows, e.name.c_str());
    }
    t.params.push_back(std::move(e));
  }
  if (c.pos != bytes.size())
    fail("optimizer state is corrupt ({} bytes after the last parameter)", bytes.size() - c.pos);
  return t;
}

}  // namespace clm

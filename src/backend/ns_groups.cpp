// The grouping of Newton-Schulz matrices by iterated shape (ns_groups.h).
#include "backend/ns_groups.h"

#include <map>
#include <utility>

namespace clm {

std::vector<NsGroup> ns_groups(const int64_t* rows, const int64_t* cols, int count) {
  std::vector<NsGroup> groups;
  std::map<std::pair<int64_t, int64_t>, size_t> at;  // (a, b) -> index in groups
  for (int i = 0; i < count; ++i) {
    const bool tr = ns_transposed(rows[i], cols[i]);
    const int64_t a = tr ? cols[i] : rows[i], b = tr ? rows[i] : cols[i];
    const auto [it, fresh] = at.emplace(std::make_pair(a, b), groups.size());
    if (fresh) {
      groups.emplace_back();
      groups.back().a = a;
      groups.back().b = b;
    }
    NsGroup& g = groups[it->second];
    g.members.push_back(i);
    g.transposed.push_back(tr);
  }
  return groups;
}

}  // namespace clm

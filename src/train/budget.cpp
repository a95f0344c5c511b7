// Budget clock (see budget.h).
#include "train/budget.h"

#include <algorithm>

namespace clm {

double BudgetClock::predict_next() const {
  if (recent.empty()) return 0;
  std::vector<double> v = recent;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

bool BudgetClock::next_step_fits() const {
  if (budget <= 0) return true;
  if (used >= budget) return false;
  return used + predict_next() <= budget;
}

void BudgetClock::add_step(double seconds) {
  used += seconds;
  recent.push_back(seconds);
  if (int(recent.size()) > kWindow) recent.erase(recent.begin());
}

double BudgetClock::fraction() const {
  if (budget <= 0) return 0;
  return std::min(1.0, used / budget);
}

}  // namespace clm

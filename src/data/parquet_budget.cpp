// The Parquet reader's resource bounds (see parquet_budget.h): parsing the overrides, the
// expansion rule and the refusals, and the shared budget of row groups decoded ahead.
#include "data/parquet_budget.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/common.h"

namespace clm {

namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

// A whole number of MiB >= 1 from the environment, or `fallback` when unset or empty.
uint64_t env_mib(const char* name, uint64_t fallback) {
  const char* e = std::getenv(name);
  if (!e || !*e) return fallback;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(e, &end, 10);
  if (*e == '-' || *end != '\0' || errno != 0 || v == 0 || v > (uint64_t(1) << 40))
    fail("{} must be a whole number of MiB from 1 to 2^40, got '{}'", name, e);
  return uint64_t(v) * kMiB;
}

double env_ratio(const char* name, double fallback) {
  const char* e = std::getenv(name);
  if (!e || !*e) return fallback;
  char* end = nullptr;
  double v = std::strtod(e, &end);
  if (*end != '\0' || !std::isfinite(v) || (v != 0 && v < 1))
    fail("{} must be a number >= 1 (decoded bytes per stored byte), or 0 for no such limit, got '{}'", name, e);
  return v;
}

}  // namespace

ParquetLimits ParquetLimits::from_env() {
  ParquetLimits l;
  l.max_row_group_bytes = env_mib("CLOCKLM_PARQUET_MAX_ROW_GROUP_MB", l.max_row_group_bytes);
  l.max_file_bytes = env_mib("CLOCKLM_PARQUET_MAX_FILE_MB", l.max_file_bytes);
  l.max_in_flight_bytes = env_mib("CLOCKLM_PARQUET_MAX_IN_FLIGHT_MB", l.max_in_flight_bytes);
  l.max_ratio = env_ratio("CLOCKLM_PARQUET_MAX_RATIO", l.max_ratio);
  return l;
}

uint64_t ratio_allowance(const ParquetLimits& limits, uint64_t stored) {
  if (limits.max_ratio <= 0) return UINT64_MAX;
  const double a = limits.max_ratio * double(stored);
  const uint64_t by_ratio = a >= 1.8e19 ? UINT64_MAX : uint64_t(a);
  return std::max(limits.ratio_floor, by_ratio);
}

// ---- InFlightBudget --------------------------------------------------------------------------

void InFlightBudget::take(uint64_t seq, uint64_t n) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return stopped_ || seq <= oldest_ || (used_ <= cap_ && n <= cap_ - used_); });
  if (stopped_) fail("Parquet reading stopped");
  used_ += n;
}

void InFlightBudget::release(uint64_t seq, uint64_t n) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    used_ -= std::min(used_, n);
    oldest_ = std::max(oldest_, seq + 1);
  }
  cv_.notify_all();
}

void InFlightBudget::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

// ---- RowGroupBudget --------------------------------------------------------------------------

RowGroupBudget::RowGroupBudget(const ParquetLimits& limits, Where where, FileBudget* file, InFlightBudget* flight,
                               uint64_t seq)
    : limits_(limits), where_(where), file_(file), flight_(flight), seq_(seq) {
  room_ = std::min(limits.max_row_group_bytes, ratio_allowance(limits, where.stored));
  file_room_ = std::min(limits.max_file_bytes, ratio_allowance(limits, where.file_size));
}

RowGroupBudget::~RowGroupBudget() {
  if (file_) file_->add(used_);
}

void RowGroupBudget::charge_memory(uint64_t n) {
  check(n);
  if (flight_) flight_->take(seq_, n);
  used_ += n;
  memory_ += n;
}

// Names the bound that n more bytes would pass: the expansion rule when it is the tighter one
// (no real shard expands that much), else the row group's or the file's limit.
void RowGroupBudget::refuse(uint64_t n) const {
  const std::string& path = *where_.path;
  const size_t g = where_.row_group;
  const uint64_t want = used_ + std::min(n, UINT64_MAX - used_);
  const uint64_t ratio_rg = ratio_allowance(limits_, where_.stored);
  if (want > room_ && ratio_rg <= limits_.max_row_group_bytes)
    fail("{}: row group {} looks like a decompression bomb (over {} MiB decoded from {} stored bytes, more than "
         "{:g} times; refusing it; CLOCKLM_PARQUET_MAX_RATIO sets the ratio)",
         path, g, want >> 20, where_.stored, limits_.max_ratio);
  if (want > room_)
    fail("{}: row group {} decodes to more than {} MiB (CLOCKLM_PARQUET_MAX_ROW_GROUP_MB sets the limit); refusing it",
         path, g, room_ >> 20);
  const uint64_t ratio_file = ratio_allowance(limits_, where_.file_size);
  if (ratio_file <= limits_.max_file_bytes)
    fail("{}: row group {} looks like a decompression bomb (the file's {} bytes decode to over {} MiB, more than "
         "{:g} times; refusing it; CLOCKLM_PARQUET_MAX_RATIO sets the ratio)",
         path, g, where_.file_size, ((file_ ? file_->used() : 0) + want) >> 20, limits_.max_ratio);
  fail("{}: row group {} takes the file past {} MiB decoded (CLOCKLM_PARQUET_MAX_FILE_MB sets the limit); refusing it",
       path, g, file_room_ >> 20);
}

}  // namespace clm

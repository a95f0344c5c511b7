// Bounds on what reading a Parquet file may cost: the limits (ParquetLimits, with defaults and
// CLOCKLM_PARQUET_* overrides), the accounting of one row group's decoded bytes against them
// (RowGroupBudget), the running total of a file (FileBudget) and the memory that row groups decoded
// ahead of their consumer hold together (InFlightBudget). Every charge is checked before the
// memory or the work it stands for is spent, so a hostile file is refused, never expanded.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace clm {

struct ParquetLimits {
  size_t max_page_bytes = size_t(512) << 20;         // one decompressed page
  uint64_t max_row_group_bytes = uint64_t(256) << 20;  // one row group, decoded (what RowGroupBudget counts)
  uint64_t max_file_bytes = uint64_t(16) << 30;      // one file's row groups, decoded, summed
  uint64_t max_in_flight_bytes = uint64_t(256) << 20;  // memory of the row groups decoded ahead at once
  double max_ratio = 1000;                           // decoded bytes per stored byte (0: no such rule) ...
  uint64_t ratio_floor = uint64_t(64) << 20;         // ... above this many decoded bytes

  // The defaults with the overrides of the environment (CLOCKLM_PARQUET_MAX_ROW_GROUP_MB,
  // CLOCKLM_PARQUET_MAX_FILE_MB, CLOCKLM_PARQUET_MAX_IN_FLIGHT_MB, CLOCKLM_PARQUET_MAX_RATIO);
  // a malformed value throws Error.
  static ParquetLimits from_env();
};

// What a decoded value costs besides its bytes, charged per value before a page's values are
// decoded: the batch's view of it, and the arrays the delta encodings decode first.
namespace parquet_cost {
inline constexpr uint64_t kView = 16;        // a std::string_view (a document, a rebuilt value, a dictionary entry)
inline constexpr uint64_t kDeltaInt = 8;     // one decoded length or prefix length
}  // namespace parquet_cost

// The largest number of bytes that `stored` bytes may decode to under the expansion rule.
uint64_t ratio_allowance(const ParquetLimits& limits, uint64_t stored);

// The decoded bytes of one file, summed over the row groups read so far (thread-safe).
class FileBudget {
 public:
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  void add(uint64_t n) { used_.fetch_add(n, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> used_{0};
};

// Memory held by row groups decoded ahead of their consumer, numbered in the order they are
// handed on. A decoder waits while its charge would pass the cap, except the oldest row group
// not yet handed on, which never waits: so reading always progresses, and the peak stays under
// the cap plus one row group. Thread-safe.
class InFlightBudget {
 public:
  explicit InFlightBudget(uint64_t cap) : cap_(cap) {}
  void take(uint64_t seq, uint64_t n);      // throws Error once stopped
  void release(uint64_t seq, uint64_t n);   // row group seq was handed on
  void stop();                              // wakes every waiter (the reader is giving up)

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t cap_;
  uint64_t used_ = 0;
  uint64_t oldest_ = 0;
  bool stopped_ = false;
};

// The decoded bytes of one row group: memory (buffers and per-value costs) and text that
// dictionary references hand out (each reference costs its entry's bytes: that is the work a
// consumer does). Checked against the row group's and the file's limits and the expansion rule.
class RowGroupBudget {
 public:
  struct Where {
    const std::string* path;  // the file
    size_t row_group;
    uint64_t stored;          // the row group's column chunk bytes
    uint64_t file_size;
  };
  RowGroupBudget(const ParquetLimits& limits, Where where, FileBudget* file, InFlightBudget* flight, uint64_t seq);
  ~RowGroupBudget();  // adds what was decoded to the file's total
  RowGroupBudget(const RowGroupBudget&) = delete;
  RowGroupBudget& operator=(const RowGroupBudget&) = delete;

  // Throws a one-line Error naming the file and row group when n more bytes would pass a limit.
  void check(uint64_t n) const {
    if (n > room_ - used_) refuse(n);
    if (file_) {
      const uint64_t f = file_->used() + used_;  // other row groups may have passed it meanwhile
      if (f > file_room_ || n > file_room_ - f) refuse(n);
    }
  }
  void charge_memory(uint64_t n);  // checks, then counts n bytes of memory about to be taken
  void charge_text(uint64_t n) {   // checks, then counts n bytes of text handed out by reference
    check(n);
    used_ += n;
  }
  uint64_t used() const { return used_; }
  uint64_t memory() const { return memory_; }

 private:
  [[noreturn]] void refuse(uint64_t n) const;
  const ParquetLimits& limits_;
  Where where_;
  FileBudget* file_;
  InFlightBudget* flight_;
  uint64_t seq_;
  uint64_t room_;       // this row group's bound: its limit and the expansion rule
  uint64_t file_room_;  // the file's, the same way
  uint64_t used_ = 0, memory_ = 0;
};

}  // namespace clm

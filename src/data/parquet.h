// Parquet input: the documents of one top-level string (BYTE_ARRAY) column of .parquet files,
// read one row group at a time. Data pages v1 and v2; PLAIN, PLAIN_DICTIONARY, RLE_DICTIONARY,
// DELTA_LENGTH_BYTE_ARRAY and DELTA_BYTE_ARRAY values; definition levels (a null is skipped and
// counted); UNCOMPRESSED, SNAPPY, GZIP and ZSTD pages. Other columns are never decoded. Corrupt
// or unsupported files throw a one-line clm::Error naming the file; every size is checked
// against the data that holds it before anything is allocated, and every decoded byte against
// the limits of data/parquet_budget.h.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "data/corpus.h"
#include "data/parquet_budget.h"
#include "data/parquet_meta.h"

namespace clm {

// Byte buffers passed from the row-group decoders to their consumer and back, so that reading a
// file reuses memory instead of faulting in fresh pages for every row group. Thread-safe.
class BufferPool {
 public:
  struct Buffer {
    std::unique_ptr<uint8_t[]> data;
    size_t capacity = 0;
  };
  Buffer get(size_t size);  // a buffer of at least `size` bytes
  void put(std::vector<Buffer>&& buffers);

 private:
  std::mutex mu_;
  std::vector<Buffer> free_;
  size_t bytes_ = 0;
};

// The text column of one row group: its documents, as views into the (decompressed) pages the
// batch keeps, so that a text is copied once, by whoever consumes it.
struct TextBatch {
  std::vector<std::string_view> docs;
  int64_t nulls = 0;  // null values, skipped
  std::vector<BufferPool::Buffer> buffers;  // what docs point into
  uint64_t in_flight = 0;  // bytes taken from the reader's InFlightBudget, returned when handed on
};

// Pages met while reading (tests check that a writer's v2 pages are really v2).
struct ParquetPageCounts {
  int64_t v1 = 0, v2 = 0, dictionary = 0;
};

class ParquetFile {
 public:
  // Reads and checks the footer and finds the column; throws Error naming the file.
  ParquetFile(const std::string& path, const std::string& column, ParquetLimits limits = {});
  // The same from bytes in memory (`name` names them in errors); `data` must outlive this.
  static std::unique_ptr<ParquetFile> from_memory(std::string_view data, const std::string& name,
                                                  const std::string& column, ParquetLimits limits = {});
  ~ParquetFile();
  ParquetFile(const ParquetFile&) = delete;
  ParquetFile& operator=(const ParquetFile&) = delete;

  size_t row_groups() const { return meta_.row_groups.size(); }
  int64_t file_size() const { return size_; }
  int64_t chunk_bytes(size_t row_group) const;  // stored bytes of the column in that row group
  // The column's values in one row group, in order (thread-safe: reads with pread). Buffers come
  // from `pool` when one is given; memory is taken from `flight` as row group number `seq` of
  // the reader when one is given. What is decoded counts against the file's limits too.
  TextBatch read_row_group(size_t row_group, ParquetPageCounts* pages = nullptr, BufferPool* pool = nullptr,
                           InFlightBudget* flight = nullptr, uint64_t seq = 0) const;
  // Top-level column names, in schema order.
  const std::vector<std::string>& columns() const { return columns_; }

 private:
  ParquetFile(std::string name, std::string_view memory, ParquetLimits limits);
  void open(const std::string& column);
  void read_at(int64_t offset, size_t n, uint8_t* out) const;
  void find_column(const std::string& column);
  void check_chunks_disjoint() const;

  std::string path_;
  int fd_ = -1;
  std::string_view memory_;
  int64_t size_ = 0;
  ParquetLimits limits_;
  parquet::FileMetaData meta_;
  std::vector<std::string> columns_;
  size_t leaf_ = 0;    // index of the column among the leaves (= in each row group's columns)
  int max_def_ = 0;    // 1 for an optional column, 0 for a required one
  int64_t data_end_ = 0;  // where the footer starts
  mutable FileBudget decoded_;  // bytes decoded from this file so far, all row groups together
};

bool is_parquet_path(std::string_view path);

// Documents of the Parquet files in order, through fn (false stops early; returns false then).
// Row groups are decoded `threads` at a time ahead of fn, in order, within
// limits.max_in_flight_bytes of memory together; stats count files, documents, bytes, null texts
// and input bytes.
bool for_each_parquet_document(const std::vector<std::string>& files, const std::string& column,
                               const std::function<bool(std::string_view)>& fn, CorpusStats& stats, int threads,
                               ParquetLimits limits = {});

}  // namespace clm

// Parquet text-column reader (see parquet.h): the footer is read and checked when a file is
// opened; a row group is read as one byte range (its column chunk) and decoded page by page.
// Definition levels are walked twice per page, once to count the values (so the memory they
// will take is checked first) and once to place them, so a run of nulls costs no memory. Every
// buffer, every value's overhead and every dictionary reference is charged to the row group's
// RowGroupBudget before it is spent.
#include "data/parquet.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <optional>

#include "core/common.h"
#include "data/parquet_codec.h"
#include "data/parquet_decode.h"

namespace clm {

using namespace parquet;

bool is_parquet_path(std::string_view path) {
  return path.size() >= 8 && path.substr(path.size() - 8) == ".parquet";
}

// ---- opening a file -------------------------------------------------------------------------

// Real footers take kilobytes to a few megabytes; the parsed form takes up to ~25 times more.
static constexpr uint32_t kMaxFooterBytes = 64u << 20;

ParquetFile::ParquetFile(std::string name, std::string_view memory, ParquetLimits limits)
    : path_(std::move(name)), memory_(memory), size_(int64_t(memory.size())), limits_(limits) {}

ParquetFile::ParquetFile(const std::string& path, const std::string& column, ParquetLimits limits)
    : path_(path), limits_(limits) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("cannot open {}: {}", path, std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    ::close(fd_);
    fail("cannot read {}: {}", path, std::strerror(errno));
  }
  size_ = int64_t(st.st_size);
  try {
    open(column);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

std::unique_ptr<ParquetFile> ParquetFile::from_memory(std::string_view data, const std::string& name,
                                                      const std::string& column, ParquetLimits limits) {
  std::unique_ptr<ParquetFile> f(new ParquetFile(name, data, limits));
  f->open(column);
  return f;
}

ParquetFile::~ParquetFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ParquetFile::read_at(int64_t offset, size_t n, uint8_t* out) const {
  if (offset < 0 || offset > size_ || int64_t(n) > size_ - offset)
    fail("corrupt Parquet file {}: a range of {} bytes at {} lies past the end of the file", path_, n, offset);
  if (n == 0) return;
  if (fd_ < 0) {
    std::memcpy(out, memory_.data() + offset, n);
    return;
  }
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd_, out + done, n - done, off_t(offset + int64_t(done)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("cannot read {}: {}", path_, std::strerror(errno));
    if (r == 0) fail("cannot read {}: the file ended early (is it being written?)", path_);
    done += size_t(r);
  }
}

void ParquetFile::open(const std::string& column) {
  const std::string bad = "corrupt Parquet file " + path_;
  if (size_ < 12) fail("{}: {} bytes is too short for a Parquet file", bad, size_);
  uint8_t head[4], tail[8];
  read_at(0, 4, head);
  read_at(size_ - 8, 8, tail);
  if (std::memcmp(tail + 4, "PARE", 4) == 0) fail("{}: encrypted Parquet files are not supported", path_);
  if (std::memcmp(head, "PAR1", 4) != 0 || std::memcmp(tail + 4, "PAR1", 4) != 0)
    fail("{} is not a Parquet file (no PAR1 magic at its start and end)", path_);
  uint32_t footer = uint32_t(tail[0]) | uint32_t(tail[1]) << 8 | uint32_t(tail[2]) << 16 | uint32_t(tail[3]) << 24;
  if (int64_t(footer) > size_ - 12) fail("{}: footer length {} runs past the file ({} bytes)", bad, footer, size_);
  if (footer > kMaxFooterBytes) fail("{}: footer of {} bytes is over the {} MiB this reader takes", bad, footer, kMaxFooterBytes >> 20);
  data_end_ = size_ - 8 - int64_t(footer);
  std::vector<uint8_t> buf(footer);
  read_at(data_end_, footer, buf.data());
  meta_ = parse_file_metadata(buf.data(), buf.size(), bad + ": footer");
  if (meta_.encrypted) fail("{}: encrypted Parquet files are not supported", path_);
  find_column(column);
}

// Walks the schema tree: top-level fields, whether each is a group, and the leaf columns under them.
void ParquetFile::find_column(const std::string& column) {
  const std::string bad = "corrupt Parquet file " + path_;
  const auto& s = meta_.schema;
  if (s.empty()) fail("{}: the footer has no schema", bad);
  const size_t n = s.size();
  if (s[0].num_children < 0 || size_t(s[0].num_children) >= n) fail("{}: bad schema root", bad);
  size_t i = 1, leaves = 0;
  std::optional<size_t> found;
  for (int32_t k = 0; k < s[0].num_children; ++k) {
    if (i >= n) fail("{}: the schema ends inside its tree", bad);
    const SchemaElement& top = s[i];
    columns_.push_back(top.name);
    if (top.name == column && !found) {
      if (top.num_children > 0 || top.repetition == kRepeated)
        fail("{}: column '{}' is nested or repeated; only a top-level string column can be read as text", path_,
             column);
      if (top.type != kByteArray)
        fail("{}: column '{}' holds {}, not strings (BYTE_ARRAY)", path_, column, type_name(top.type));
      found = leaves;
      max_def_ = top.repetition == kOptional ? 1 : 0;
    }
    for (size_t pending = 1; pending > 0; --pending) {
      if (i >= n) fail("{}: the schema ends inside its tree", bad);
      const SchemaElement& e = s[i++];
      if (e.num_children < 0 || size_t(e.num_children) >= n) fail("{}: bad schema element '{}'", bad, e.name);
      if (e.num_children > 0) pending += size_t(e.num_children);
      else ++leaves;
    }
  }
  if (i != n) fail("{}: the schema has {} elements outside its tree", bad, n - i);
  if (!found)
    fail("{} has no column '{}' (its columns: {})", path_, column,
         columns_.empty() ? std::string("none") : fmt::format("{}", fmt::join(columns_, ", ")));
  leaf_ = *found;
  for (size_t g = 0; g < meta_.row_groups.size(); ++g) {
    const RowGroup& rg = meta_.row_groups[g];
    if (rg.columns.size() != leaves)
      fail("{}: row group {} has {} columns, the schema {}", bad, g, rg.columns.size(), leaves);
    if (rg.num_rows < 0) fail("{}: row group {} has {} rows", bad, g, rg.num_rows);
    const ColumnChunk& c = rg.columns[leaf_];
    if (c.encrypted) fail("{}: encrypted Parquet files are not supported", path_);
    if (c.external) fail("{}: column '{}' keeps its data in another file, which is not supported", path_, column);
    if (c.type != kByteArray || c.path.size() != 1 || c.path[0] != column)
      fail("{}: row group {} describes column '{}' inconsistently with the schema", bad, g, column);
    if (!codec_supported(c.codec))
      fail("{}: column '{}' uses compression {}, which is not supported (UNCOMPRESSED, SNAPPY, GZIP, ZSTD are)",
           path_, column, codec_name(c.codec));
    chunk_bytes(g);  // checks its byte range
  }
  check_chunks_disjoint();
}

// The byte range of a column chunk: from its dictionary page (if any) for total_compressed_size.
static std::pair<int64_t, int64_t> chunk_range(const ColumnChunk& c) {
  int64_t start = c.data_page_offset;
  if (c.dictionary_page_offset >= 4 && c.dictionary_page_offset < start) start = c.dictionary_page_offset;
  return {start, c.total_compressed_size};
}

int64_t ParquetFile::chunk_bytes(size_t g) const {
  auto [start, len] = chunk_range(meta_.row_groups[g].columns[leaf_]);
  if (start < 4 || len < 0 || start > data_end_ || len > data_end_ - start)
    fail("corrupt Parquet file {}: row group {}'s column chunk ({} bytes at {}) lies outside the data", path_, g,
         len, start);
  return len;
}

// Row groups whose column chunks share bytes would make the reader decode the same data several
// times over (and at once): no writer does that, so it is refused with the footer.
void ParquetFile::check_chunks_disjoint() const {
  struct Range { int64_t start, end; size_t group; };
  std::vector<Range> r;
  r.reserve(meta_.row_groups.size());
  for (size_t g = 0; g < meta_.row_groups.size(); ++g) {
    auto [start, len] = chunk_range(meta_.row_groups[g].columns[leaf_]);
    if (len > 0) r.push_back({start, start + len, g});
  }
  std::sort(r.begin(), r.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
  for (size_t i = 1; i < r.size(); ++i)
    if (r[i].start < r[i - 1].end)
      fail("corrupt Parquet file {}: row groups {} and {} point at overlapping column chunk bytes; refusing it", path_,
           std::min(r[i - 1].group, r[i].group), std::max(r[i - 1].group, r[i].group));
}

// ---- buffers --------------------------------------------------------------------------------

static constexpr size_t kPoolBytes = size_t(256) << 20;  // kept for reuse at most

BufferPool::Buffer BufferPool::get(size_t size) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i].capacity >= size && (best == free_.size() || free_[i].capacity < free_[best].capacity)) best = i;
    if (best < free_.size()) {
      Buffer b = std::move(free_[best]);
      free_.erase(free_.begin() + std::ptrdiff_t(best));
      bytes_ -= b.capacity;
      return b;
    }
  }
  size_t cap = (size + size / 4 + 4095) & ~size_t(4095);  // room for a somewhat larger page next time
  return {std::unique_ptr<uint8_t[]>(new uint8_t[cap]), cap};
}

void BufferPool::put(std::vector<Buffer>&& buffers) {
  std::lock_guard<std::mutex> lk(mu_);
  for (Buffer& b : buffers) {
    if (bytes_ + b.capacity > kPoolBytes || free_.size() >= 256) break;
    bytes_ += b.capacity;
    free_.push_back(std::move(b));
  }
  buffers.clear();
}

// ---- decoding a column chunk ----------------------------------------------------------------

namespace {

// Collects a row group's values and the buffers they point into, within its budget. Values are
// charged a page at a time (values_cost) before they are decoded, so add() itself is free.
struct Sink {
  TextBatch& batch;
  RowGroupBudget& budget;
  BufferPool* pool;
  void add(std::string_view v) { batch.docs.push_back(v); }
  // Charges `count` values of `each` bytes of overhead, refusing a count too large to multiply.
  void values_cost(uint64_t count, uint64_t each) {
    budget.check(count > UINT64_MAX / 64 ? UINT64_MAX : count * each);
    budget.charge_memory(count * each);
  }
  // A buffer of `size` bytes that the batch keeps.
  uint8_t* alloc(size_t size) {
    budget.charge_memory(size);
    if (pool) batch.buffers.push_back(pool->get(size));
    else batch.buffers.push_back({std::unique_ptr<uint8_t[]>(new uint8_t[size ? size : 1]), size});
    return batch.buffers.back().data.get();
  }
};

uint32_t le32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }

// The non-null values of one page, in any of the supported byte-array encodings. Values are views
// into the page (or the dictionary); DELTA_BYTE_ARRAY values are rebuilt into a kept buffer.
class ValueReader {
 public:
  ValueReader(int encoding, const uint8_t* p, size_t n, size_t count, const std::vector<std::string_view>* dict,
              Sink& sink, const std::string& where)
      : enc_(encoding), p_(p), end_(p + n), dict_(dict), where_(where), budget_(sink.budget) {
    switch (enc_) {
      case kPlain: break;
      case kPlainDictionary:
      case kRleDictionary:
        if (!dict_) fail("{} (dictionary-encoded page without a dictionary page)", where_);
        if (p_ >= end_) fail("{} (dictionary indices missing)", where_);
        idx_.emplace(p_ + 1, size_t(end_ - p_ - 1), int(*p_), &where_);
        break;
      case kDeltaLengthByteArray: p_ = decode_delta_binary_packed(p_, end_, count, lens_, where_); break;
      case kDeltaByteArray: rebuild_delta(count, sink); break;
      default: fail("{} (values in {} encoding are not supported for text)", where_, encoding_name(enc_));
    }
  }

  std::string_view next() {
    switch (enc_) {
      case kPlain:
        if (end_ - p_ < 4) fail("{} (PLAIN values end early)", where_);
        p_ += 4;
        return take(le32(p_ - 4));
      case kPlainDictionary:
      case kRleDictionary: {
        uint32_t i;
        idx_->next(1, i);
        if (i >= dict_->size()) fail("{} (dictionary index {} past the dictionary's {} entries)", where_, i, dict_->size());
        budget_.charge_text((*dict_)[i].size());  // a reference hands out the entry's bytes again
        return (*dict_)[i];
      }
      case kDeltaLengthByteArray: return take_length(lens_[k_++]);
      default: return rebuilt_[k_++];  // kDeltaByteArray
    }
  }

 private:
  // DELTA_BYTE_ARRAY: value i is the first prefix[i] bytes of value i-1, then suffix i. The sizes
  // are summed (and checked against the limit) before the values are written out.
  void rebuild_delta(size_t count, Sink& sink) {
    std::vector<int64_t> prefixes;
    p_ = decode_delta_binary_packed(p_, end_, count, prefixes, where_);
    p_ = decode_delta_binary_packed(p_, end_, count, lens_, where_);
    uint64_t total = 0, prev = 0, suffixes = 0;
    for (size_t i = 0; i < count; ++i) {
      if (prefixes[i] < 0 || uint64_t(prefixes[i]) > prev)
        fail("{} (prefix length {} longer than the previous value)", where_, prefixes[i]);
      if (lens_[i] < 0 || uint64_t(lens_[i]) > uint64_t(end_ - p_) - suffixes)
        fail("{} (a suffix of {} bytes runs past the page)", where_, lens_[i]);
      suffixes += uint64_t(lens_[i]);
      prev = uint64_t(prefixes[i]) + uint64_t(lens_[i]);
      total += prev;
      budget_.check(total);
    }
    uint8_t* out = sink.alloc(size_t(total));
    rebuilt_.reserve(count);
    const uint8_t* last = out;
    for (size_t i = 0; i < count; ++i) {
      size_t pre = size_t(prefixes[i]), suf = size_t(lens_[i]);
      std::memmove(out, last, pre);
      std::memcpy(out + pre, p_, suf);
      p_ += suf;
      rebuilt_.emplace_back(reinterpret_cast<const char*>(out), pre + suf);
      last = out;
      out += pre + suf;
    }
  }
  std::string_view take_length(int64_t len) {
    if (len < 0) fail("{} (negative value length {})", where_, len);
    return take(uint64_t(len));
  }
  std::string_view take(uint64_t len) {
    if (len > uint64_t(end_ - p_)) fail("{} (a value of {} bytes runs past the page)", where_, len);
    std::string_view v(reinterpret_cast<const char*>(p_), size_t(len));
    p_ += len;
    return v;
  }

  int enc_;
  const uint8_t* p_;
  const uint8_t* end_;
  const std::vector<std::string_view>* dict_;
  const std::string& where_;
  RowGroupBudget& budget_;
  std::optional<RleHybrid> idx_;
  std::vector<int64_t> lens_;
  std::vector<std::string_view> rebuilt_;
  size_t k_ = 0;
};

// Reads the pages of one column chunk into a batch.
struct ChunkDecoder {
  ChunkDecoder(const uint8_t* d, size_t n, int c, int md, size_t mp, std::string wb, ParquetPageCounts* pg, Sink& sk)
      : data(d), size(n), codec(c), max_def(md), max_page(mp), where_base(std::move(wb)), pages(pg), sink(sk) {}
  const uint8_t* data;
  size_t size;
  int codec;
  int max_def;
  size_t max_page;
  std::string where_base;  // "corrupt Parquet file X: row group G"
  ParquetPageCounts* pages;
  Sink& sink;

  std::vector<std::string_view> dict;
  bool have_dict = false, seen_data = false;
  std::string where;

  // Page bytes: decompressed into a buffer the batch keeps, or the stored bytes themselves.
  const uint8_t* bytes(int c, const uint8_t* src, size_t n, size_t out_size) {
    if (c == kUncompressed) {
      if (n != out_size) fail("{} (stored page of {} bytes says it holds {})", where, n, out_size);
      return src;
    }
    check_decompressed_size(c, src, n, out_size, where);
    uint8_t* out = sink.alloc(out_size);
    decompress_into(c, src, n, out, out_size, where);
    return out;
  }

  void dictionary_page(const PageHeader& h, const uint8_t* body) {
    if (have_dict) fail("{} (a second dictionary page)", where);
    if (seen_data) fail("{} (a dictionary page after data pages)", where);
    if (h.encoding != kPlain && h.encoding != kPlainDictionary)
      fail("{} (dictionary in {} encoding)", where, encoding_name(h.encoding));
    if (h.num_values < 0 || uint64_t(h.num_values) > uint64_t(h.uncompressed_size) / 4)
      fail("{} (dictionary of {} entries in {} bytes)", where, h.num_values, h.uncompressed_size);
    sink.values_cost(uint64_t(h.num_values), parquet_cost::kView);
    const uint8_t* p = bytes(codec, body, size_t(h.compressed_size), size_t(h.uncompressed_size));
    const uint8_t* end = p + h.uncompressed_size;
    dict.reserve(size_t(h.num_values));
    for (int32_t i = 0; i < h.num_values; ++i) {
      if (end - p < 4) fail("{} (dictionary entries end early)", where);
      uint32_t len = le32(p);
      p += 4;
      if (len > uint64_t(end - p)) fail("{} (a dictionary entry runs past the page)", where);
      dict.emplace_back(reinterpret_cast<const char*>(p), len);
      p += len;
    }
    have_dict = true;
    if (pages) pages->dictionary++;
  }

  // The overhead of one value: its view in the batch, and what its encoding decodes first.
  static uint64_t value_cost(int encoding) {
    using namespace parquet_cost;
    if (encoding == kDeltaLengthByteArray) return kView + kDeltaInt;  // its length
    if (encoding == kDeltaByteArray) return kView + 2 * kDeltaInt + kView;  // prefix, suffix length, rebuilt view
    return kView;
  }

  // Values of a data page given its definition levels (none when the column is required).
  void values(int encoding, const uint8_t* lv, size_t ln, const uint8_t* v, size_t vn, int32_t num_values) {
    size_t present = size_t(num_values);
    if (max_def > 0) {
      present = 0;
      RleHybrid levels(lv, ln, 1, &where);
      for (uint32_t left = uint32_t(num_values), value; left > 0;) {
        uint32_t k = levels.next(left, value);
        if (value > uint32_t(max_def)) fail("{} (definition level {} above the column's {})", where, value, max_def);
        if (value == uint32_t(max_def)) present += k;
        left -= k;
      }
    }
    if (present == 0) {
      sink.batch.nulls += num_values;
      return;
    }
    sink.values_cost(present, value_cost(encoding));
    sink.batch.docs.reserve(sink.batch.docs.size() + present);
    ValueReader reader(encoding, v, vn, present, have_dict ? &dict : nullptr, sink, where);
    if (max_def == 0) {
      for (size_t i = 0; i < present; ++i) sink.add(reader.next());
      return;
    }
    RleHybrid levels(lv, ln, 1, &where);
    for (uint32_t left = uint32_t(num_values), value; left > 0;) {
      uint32_t k = levels.next(left, value);
      if (value == uint32_t(max_def)) {
        for (uint32_t i = 0; i < k; ++i) sink.add(reader.next());
      } else {
        sink.batch.nulls += k;
      }
      left -= k;
    }
  }

  void data_page_v1(const PageHeader& h, const uint8_t* body) {
    const uint8_t* p = bytes(codec, body, size_t(h.compressed_size), size_t(h.uncompressed_size));
    size_t n = size_t(h.uncompressed_size);
    const uint8_t* lv = nullptr;
    size_t ln = 0;
    if (max_def > 0) {
      if (h.def_encoding != kRle)
        fail("{} (definition levels in {} encoding are not supported)", where, encoding_name(h.def_encoding));
      if (n < 4) fail("{} (definition levels missing)", where);
      ln = le32(p);
      if (ln > n - 4) fail("{} (definition levels of {} bytes run past the page)", where, ln);
      lv = p + 4;
      p += 4 + ln;
      n -= 4 + ln;
    }
    values(h.encoding, lv, ln, p, n, h.num_values);
    if (pages) pages->v1++;
  }

  void data_page_v2(const PageHeader& h, const uint8_t* body) {
    int64_t levels = int64_t(h.rep_levels_bytes) + h.def_levels_bytes;
    if (h.rep_levels_bytes < 0 || h.def_levels_bytes < 0 || levels > h.compressed_size || levels > h.uncompressed_size)
      fail("{} (level lengths {} + {} do not fit the page)", where, h.rep_levels_bytes, h.def_levels_bytes);
    const uint8_t* lv = body + h.rep_levels_bytes;
    size_t ln = size_t(h.def_levels_bytes);
    size_t vn = size_t(h.uncompressed_size - levels);
    const uint8_t* v = bytes(h.v2_compressed ? codec : kUncompressed, body + levels, size_t(h.compressed_size - levels), vn);
    values(h.encoding, lv, ln, v, vn, h.num_values);
    if (pages) pages->v2++;
  }

  void run(int64_t rows) {
    size_t pos = 0;
    int64_t seen = 0;
    while (seen < rows) {
      where = fmt::format("{}, page at chunk byte {}", where_base, pos);
      if (pos >= size) fail("{} (the column chunk ends after {} of {} values)", where, seen, rows);
      PageHeader h = parse_page_header(data + pos, size - pos, where + ": page header");
      pos += h.header_bytes;
      if (h.compressed_size < 0 || size_t(h.compressed_size) > size - pos)
        fail("{} (page of {} bytes runs past the column chunk's {})", where, h.compressed_size, size - pos);
      if (h.uncompressed_size < 0 || size_t(h.uncompressed_size) > max_page)
        fail("{} (page says it decompresses to {} bytes)", where, h.uncompressed_size);
      const uint8_t* body = data + pos;
      pos += size_t(h.compressed_size);
      if (h.type == kDictionaryPage) {
        dictionary_page(h, body);
        continue;
      }
      if (h.type != kDataPage && h.type != kDataPageV2) continue;  // index pages carry no values
      seen_data = true;
      if (h.num_values < 0 || h.num_values > rows - seen)
        fail("{} (page of {} values where {} of the row group's {} remain)", where, h.num_values, rows - seen, rows);
      if (h.type == kDataPage) data_page_v1(h, body);
      else data_page_v2(h, body);
      seen += h.num_values;
    }
  }
};

}  // namespace

TextBatch ParquetFile::read_row_group(size_t g, ParquetPageCounts* pages, BufferPool* pool, InFlightBudget* flight,
                                      uint64_t seq) const {
  if (g >= meta_.row_groups.size()) fail("{}: no row group {}", path_, g);
  const RowGroup& rg = meta_.row_groups[g];
  const ColumnChunk& c = rg.columns[leaf_];
  const size_t len = size_t(chunk_bytes(g));
  TextBatch batch;
  std::string where = fmt::format("corrupt Parquet file {}: row group {}", path_, g);
  RowGroupBudget budget(limits_, {&path_, g, uint64_t(len), uint64_t(size_)}, &decoded_, flight, seq);
  Sink sink{batch, budget, pool};
  uint8_t* chunk = sink.alloc(len);  // kept: stored pages are read in place
  read_at(chunk_range(c).first, len, chunk);
  ChunkDecoder d(chunk, len, c.codec, max_def_, limits_.max_page_bytes, where, pages, sink);
  d.run(rg.num_rows);
  batch.in_flight = flight ? budget.memory() : 0;
  return batch;
}

// ---- streaming several files ----------------------------------------------------------------

bool for_each_parquet_document(const std::vector<std::string>& files, const std::string& column,
                               const std::function<bool(std::string_view)>& fn, CorpusStats& st, int threads,
                               ParquetLimits limits) {
  struct Pending {
    std::shared_ptr<const ParquetFile> file;
    size_t row_group;
    bool last;  // the file's last row group
    std::future<TextBatch> batch;
    uint64_t seq;  // its number in the InFlightBudget
  };
  BufferPool pool;  // declared before `ahead`: outlives the decoders that use it
  InFlightBudget flight(limits.max_in_flight_bytes);
  std::deque<Pending> ahead;
  // Declared after `ahead`, so it runs first on the way out: decoders waiting for memory give up
  // before `ahead`'s futures wait for them.
  struct StopOnExit {
    InFlightBudget& b;
    ~StopOnExit() { b.stop(); }
  } stop_on_exit{flight};
  uint64_t next_seq = 0;
  std::shared_ptr<ParquetFile> cur;
  size_t next_file = 0, next_group = 0;
  // Starts decoding the next row group; false when none is left.
  auto launch = [&]() -> bool {
    for (;;) {
      if (!cur) {
        if (next_file == files.size()) return false;
        cur = std::make_shared<ParquetFile>(files[next_file++], column, limits);
        next_group = 0;
        if (cur->row_groups() == 0) {
          ahead.push_back({cur, 0, true, {}, 0});
          cur.reset();
          return true;
        }
      }
      size_t g = next_group++;
      std::shared_ptr<const ParquetFile> f = cur;
      bool last = next_group == cur->row_groups();
      const uint64_t seq = next_seq++;
      auto decode = [f, g, &pool, &flight, seq] { return f->read_row_group(g, nullptr, &pool, &flight, seq); };
      ahead.push_back({f, g, last, std::async(std::launch::async, decode), seq});
      if (last) cur.reset();
      return true;
    }
  };
  const size_t window = size_t(std::max(1, threads)) + 1;  // one more than decode at once: one is being handed on
  while (ahead.size() < window && launch()) {}
  int64_t file_chunks = 0;
  while (!ahead.empty()) {
    Pending p = std::move(ahead.front());
    ahead.pop_front();
    const bool has = p.batch.valid();  // false for a file without row groups
    TextBatch b = has ? p.batch.get() : TextBatch{};
    const int64_t chunk = has ? p.file->chunk_bytes(p.row_group) : 0;
    st.null_texts += b.nulls;
    for (std::string_view d : b.docs) {
      st.documents++;
      st.bytes += int64_t(d.size());
      if (!fn(d)) return false;
    }
    pool.put(std::move(b.buffers));
    if (has) flight.release(p.seq, b.in_flight);
    st.input_bytes += chunk;
    file_chunks += chunk;
    if (p.last) {  // the rest of the file (other columns, footer) counts as read too
      st.files++;
      st.input_bytes += p.file->file_size() - file_chunks;
      file_chunks = 0;
    }
    // Refilled after the documents are handed on, so that a caller stopping early never meets
    // the errors of files it would not have reached.
    while (ahead.size() < window && launch()) {}
  }
  return true;
}

}  // namespace clm

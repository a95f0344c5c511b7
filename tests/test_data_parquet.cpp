// Tests for the Parquet reader against an independent writer: DuckDB's Node package writes
// fixtures (tests/clients/parquet_fixtures.mjs: every compression, v1 and v2 pages, dictionary
// and plain values, nulls, other and nested columns around the text) together with what DuckDB
// reads back; clocklm must read the same texts, byte for byte and in order. Corrupted copies of
// the fixtures must each give a one-line error naming the file. Skipped, with the reason, when
// node or the package is missing.
#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/common.h"
#include "data/corpus.h"
#include "data/parquet.h"
#include "data/parquet_decode.h"
#include "data/parquet_meta.h"
#include "data/thrift_compact.h"

#include "test_cli_util.h"
#include "test_data_util.h"
#include "test_thrift_util.h"

using namespace clm;
namespace fs = std::filesystem;

namespace {

const std::string kClients = std::string(CLOCKLM_SOURCE_DIR) + "/tests/clients";

// The fixture folder, written once per test process; empty with *skip set when it cannot be.
const fs::path& fixtures(std::string* skip) {
  static std::string why;
  static fs::path dir = [] {
    if (cli_test::run_cmd("node --version").status != 0) {
      why = "node is not installed";
      return fs::path();
    }
    if (!fs::exists(kClients + "/node_modules/@duckdb/node-api")) {
      why = "@duckdb/node-api is not installed in tests/clients (npm ci there)";
      return fs::path();
    }
    fs::path d = data_test::temp_dir("parquet_fixtures");
    auto r = cli_test::run_cmd("cd " + kClients + " && node parquet_fixtures.mjs " + d.string());
    if (r.status != 0) {
      why = "FAILED: parquet_fixtures.mjs: " + r.out;  // not a skip: reported as a failure below
      return fs::path();
    }
    return d;
  }();
  *skip = why;
  return dir;
}

#define NEED_FIXTURES(dir)                                                   \
  std::string skip_reason;                                                   \
  const fs::path& dir = fixtures(&skip_reason);                              \
  if (dir.empty()) {                                                         \
    ASSERT_EQ(skip_reason.rfind("FAILED", 0), std::string::npos) << skip_reason; \
    GTEST_SKIP() << skip_reason;                                             \
  }

struct Expected {
  std::vector<std::string> texts;
  int64_t nulls = 0;
};

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += char(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

Expected expected(const fs::path& dir, const std::string& name) {
  Expected e;
  std::ifstream f(dir / (name + ".expected"));
  std::string line;
  while (std::getline(f, line)) {
    if (line == "-") e.nulls++;
    else e.texts.push_back(unhex(line));
  }
  return e;
}

std::vector<std::string> read_docs(const std::vector<std::string>& files, const std::string& column, CorpusStats& st,
                                   int threads = 0) {
  CorpusOptions o;
  o.text_column = column;
  o.threads = threads;
  std::vector<std::string> docs;
  for_each_document(files, [&](std::string_view d) { docs.emplace_back(d); return true; }, &st, o);
  return docs;
}

nlohmann::json fixture_list(const fs::path& dir) { return nlohmann::json::parse(read_file((dir / "fixtures.json").string()))["fixtures"]; }

std::string bytes_of(const fs::path& p) { return read_file(p.string()); }

// The error clocklm gives for a file (empty when it reads without one).
std::string error_of(const fs::path& p, const std::string& column = "text") {
  try {
    CorpusStats st;
    read_docs({p.string()}, column, st);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_one_line_error(const fs::path& p, const std::string& part) {
  std::string e = error_of(p);
  EXPECT_NE(e, "") << p << " was read without an error";
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_NE(e.find(p.string()), std::string::npos) << "the error does not name the file: " << e;
  EXPECT_NE(e.find(part), std::string::npos) << "expected '" << part << "' in: " << e;
}

// Page header fields at `pos` of a file: where the compressed size's varint lies.
struct HeaderSpot {
  parquet::PageHeader h;
  size_t size_pos = 0, size_len = 0;
};
HeaderSpot page_at(const std::string& b, size_t pos) {
  HeaderSpot s;
  s.h = parquet::parse_page_header(reinterpret_cast<const uint8_t*>(b.data()) + pos, b.size() - pos, "test");
  // DuckDB writes fields 1, 2, 3 first, each an i32 (0x15) varint.
  size_t p = pos;
  for (int field = 1; field <= 3; ++field) {
    EXPECT_EQ(uint8_t(b[p]), 0x15);
    ++p;
    size_t start = p;
    while (uint8_t(b[p]) & 0x80) ++p;
    ++p;
    if (field == 3) s.size_pos = start, s.size_len = p - start;
  }
  return s;
}

// `n` values of the RLE / bit-packed hybrid encoding.
std::vector<uint32_t> decode_hybrid(const std::string& data, int bw, size_t n) {
  std::string what = "test hybrid";
  parquet::RleHybrid r(reinterpret_cast<const uint8_t*>(data.data()), data.size(), bw, &what);
  std::vector<uint32_t> out;
  for (uint32_t v; out.size() < n;) out.insert(out.end(), r.next(uint32_t(n - out.size()), v), v);
  return out;
}

// Values as one bit-packed run of the hybrid encoding (padded to a multiple of 8 values).
std::string bit_packed(const std::vector<uint32_t>& v, int bw) {
  thrift_test::Compact w;
  size_t groups = (v.size() + 7) / 8;
  w.varint(uint64_t(groups) << 1 | 1);
  std::string bits(groups * size_t(bw), '\0');
  for (size_t i = 0; i < v.size(); ++i)
    for (int b = 0; b < bw; ++b)
      if (v[i] >> b & 1) bits[(i * size_t(bw) + size_t(b)) / 8] |= char(1 << ((i * size_t(bw) + size_t(b)) % 8));
  return w.out + bits;
}

// DELTA_BINARY_PACKED: blocks of 128 deltas in 4 miniblocks of 32.
std::string delta_binary_packed(const std::vector<int64_t>& v) {
  thrift_test::Compact w;
  auto zz = [](int64_t x) { return uint64_t(x << 1) ^ uint64_t(x >> 63); };
  w.varint(128);
  w.varint(4);
  w.varint(v.size());
  w.varint(zz(v.empty() ? 0 : v[0]));
  for (size_t b = 1; b < v.size(); b += 128) {
    size_t n = std::min<size_t>(128, v.size() - b);
    std::vector<int64_t> d(n);
    for (size_t i = 0; i < n; ++i) d[i] = v[b + i] - v[b + i - 1];
    int64_t mn = *std::min_element(d.begin(), d.end());
    w.varint(zz(mn));
    std::string widths(4, '\0'), bodies;
    for (size_t m = 0; m * 32 < n; ++m) {
      std::vector<uint32_t> mini(32, 0);
      int bw = 0;
      for (size_t i = 0; i < 32 && m * 32 + i < n; ++i) {
        mini[i] = uint32_t(d[m * 32 + i] - mn);
        while (bw < 32 && (mini[i] >> bw)) ++bw;
      }
      widths[m] = char(bw);
      std::string packed = bit_packed(mini, bw);
      bodies += packed.substr(packed.size() - size_t(4 * bw));  // without the run header
    }
    w.out += widths + bodies;
  }
  return w.out;
}

// PLAIN byte arrays re-encoded as DELTA_BYTE_ARRAY (prefix shared with the previous value + suffix).
std::string plain_to_delta_byte_array(const std::string& plain) {
  std::vector<std::string> vals;
  for (size_t at = 0; at < plain.size();) {
    uint32_t n = uint32_t(uint8_t(plain[at])) | uint32_t(uint8_t(plain[at + 1])) << 8 |
                 uint32_t(uint8_t(plain[at + 2])) << 16 | uint32_t(uint8_t(plain[at + 3])) << 24;
    vals.push_back(plain.substr(at + 4, n));
    at += 4 + n;
  }
  std::vector<int64_t> prefixes, lengths;
  std::string suffixes, prev;
  for (const std::string& v : vals) {
    size_t p = 0;
    while (p < v.size() && p < prev.size() && v[p] == prev[p]) ++p;
    prefixes.push_back(int64_t(p));
    lengths.push_back(int64_t(v.size() - p));
    suffixes += v.substr(p);
    prev = v;
  }
  return delta_binary_packed(prefixes) + delta_binary_packed(lengths) + suffixes;
}

std::string zigzag_varint(int64_t v) {
  thrift_test::Compact w;
  w.varint(uint64_t(v << 1) ^ uint64_t(v >> 63));
  return w.out;
}

// The file (one row group of one optional text column) with each v1 data page rewritten as two
// DATA_PAGE_V2 pages: levels stored plain in front, values compressed on their own; the chunk
// sizes in the footer patched to match. With delta_byte_array, PLAIN values are re-encoded as
// DELTA_BYTE_ARRAY.
std::string to_data_page_v2(const std::string& file, bool delta_byte_array = false) {
  auto u8 = [&](size_t at) { return reinterpret_cast<const uint8_t*>(file.data()) + at; };
  uint32_t flen = uint32_t(*u8(file.size() - 8)) | uint32_t(*u8(file.size() - 7)) << 8 | uint32_t(*u8(file.size() - 6)) << 16;
  size_t footer_at = file.size() - 8 - flen;
  parquet::FileMetaData m = parquet::parse_file_metadata(u8(footer_at), flen, "test footer");
  EXPECT_EQ(m.row_groups.size(), 1u);
  EXPECT_EQ(m.row_groups[0].columns.size(), 1u);
  const parquet::ColumnChunk& c = m.row_groups[0].columns[0];
  size_t start = size_t(c.dictionary_page_offset >= 4 ? c.dictionary_page_offset : c.data_page_offset);
  size_t end = start + size_t(c.total_compressed_size), pos = start;
  std::string chunk;
  int64_t uncompressed_total = 0;
  while (pos < end) {
    parquet::PageHeader h = parquet::parse_page_header(u8(pos), end - pos, "test page");
    std::string body = file.substr(pos + h.header_bytes, size_t(h.compressed_size));
    if (h.type != parquet::kDataPage) {
      chunk += file.substr(pos, h.header_bytes) + body;
      uncompressed_total += int64_t(h.header_bytes) + h.uncompressed_size;
      pos += h.header_bytes + size_t(h.compressed_size);
      continue;
    }
    pos += h.header_bytes + size_t(h.compressed_size);
    std::string raw = body;
    if (c.codec == parquet::kZstd) {
      raw.assign(size_t(h.uncompressed_size), '\0');
      EXPECT_EQ(ZSTD_decompress(raw.data(), raw.size(), body.data(), body.size()), raw.size());
    }
    uint32_t ln = uint32_t(uint8_t(raw[0])) | uint32_t(uint8_t(raw[1])) << 8 | uint32_t(uint8_t(raw[2])) << 16;
    std::string levels = raw.substr(4, ln), values = raw.substr(4 + ln);
    // Split the page in two at its middle row: levels and (dictionary) indices re-encoded as
    // bit-packed runs, PLAIN values cut where the first half's end.
    std::vector<uint32_t> lv = decode_hybrid(levels, 1, size_t(h.num_values));
    const size_t half = lv.size() / 2;
    const size_t present1 = size_t(std::count(lv.begin(), lv.begin() + std::ptrdiff_t(half), 1u));
    const size_t present = size_t(std::count(lv.begin(), lv.end(), 1u));
    std::string vals[2];
    if (h.encoding == parquet::kPlain) {
      size_t at = 0;
      for (size_t i = 0; i < present1; ++i)
        at += 4 + (uint32_t(uint8_t(values[at])) | uint32_t(uint8_t(values[at + 1])) << 8 |
                   uint32_t(uint8_t(values[at + 2])) << 16 | uint32_t(uint8_t(values[at + 3])) << 24);
      vals[0] = values.substr(0, at);
      vals[1] = values.substr(at);
      if (delta_byte_array)
        for (std::string& v : vals) v = plain_to_delta_byte_array(v);
    } else {
      int bw = uint8_t(values[0]);
      std::vector<uint32_t> idx = decode_hybrid(values.substr(1), bw, present);
      vals[0] = char(bw) + bit_packed({idx.begin(), idx.begin() + std::ptrdiff_t(present1)}, bw);
      vals[1] = char(bw) + bit_packed({idx.begin() + std::ptrdiff_t(present1), idx.end()}, bw);
    }
    std::vector<uint32_t> lvs[2] = {{lv.begin(), lv.begin() + std::ptrdiff_t(half)}, {lv.begin() + std::ptrdiff_t(half), lv.end()}};
    for (int part = 0; part < 2; ++part) {
      std::string lbytes = bit_packed(lvs[part], 1), stored = vals[part];
      int64_t rows = int64_t(lvs[part].size());
      int64_t nulls = rows - std::count(lvs[part].begin(), lvs[part].end(), 1u);
      if (c.codec == parquet::kZstd) {
        stored.assign(ZSTD_compressBound(vals[part].size()), '\0');
        stored.resize(ZSTD_compress(stored.data(), stored.size(), vals[part].data(), vals[part].size(), 3));
      }
      thrift_test::Compact w;
      w.i32(1, parquet::kDataPageV2);
      w.i32(2, int64_t(lbytes.size() + vals[part].size()));
      w.i32(3, int64_t(lbytes.size() + stored.size()));
      w.begin(8);
      w.i32(1, rows);
      w.i32(2, nulls);
      w.i32(3, rows);
      w.i32(4, delta_byte_array && h.encoding == parquet::kPlain ? int(parquet::kDeltaByteArray) : h.encoding);
      w.i32(5, int64_t(lbytes.size()));
      w.i32(6, 0);
      w.boolean(7, c.codec != parquet::kUncompressed);
      w.end();
      w.end();
      chunk += w.out + lbytes + stored;
      uncompressed_total += int64_t(w.out.size() + lbytes.size() + vals[part].size());
    }
  }
  // Patch ColumnMetaData's total_uncompressed_size (6) and total_compressed_size (7).
  std::string footer = file.substr(footer_at, flen);
  ThriftReader r(reinterpret_cast<const uint8_t*>(footer.data()), footer.size(), "test footer");
  std::vector<std::tuple<size_t, size_t, int64_t>> patches;
  int16_t id;
  uint8_t t, et;
  r.begin_struct();
  while (r.next_field(id, t)) {
    if (id != 4) { r.skip(t); continue; }
    r.read_list(t, et);
    r.begin_struct();  // the row group
    while (r.next_field(id, t)) {
      if (id != 1) { r.skip(t); continue; }
      r.read_list(t, et);
      r.begin_struct();  // the column chunk
      while (r.next_field(id, t)) {
        if (id != 3) { r.skip(t); continue; }
        r.begin_struct();  // its metadata
        while (r.next_field(id, t)) {
          size_t at = r.position();
          if (id == 6 || id == 7) {
            r.read_int(t);
            patches.emplace_back(at, r.position() - at, id == 6 ? uncompressed_total : int64_t(chunk.size()));
          } else {
            r.skip(t);
          }
        }
      }
    }
  }
  EXPECT_EQ(patches.size(), 2u);
  for (auto it = patches.rbegin(); it != patches.rend(); ++it)
    footer.replace(std::get<0>(*it), std::get<1>(*it), zigzag_varint(std::get<2>(*it)));
  std::string out = file.substr(0, start) + chunk + file.substr(end, footer_at - end) + footer;
  uint32_t n = uint32_t(footer.size());
  for (int i = 0; i < 4; ++i) out += char(n >> (8 * i));
  return out + "PAR1";
}

}  // namespace

TEST(DataParquet, ReadsDataPageV2AsDuckDBDoes) {
  NEED_FIXTURES(dir);
  fs::path d = data_test::temp_dir("parquet_v2pages");
  for (std::string source : {"v2src_uncompressed", "v2src_zstd", "v2src_dict", "v2src_zstd+dba"}) {
    bool dba = source.ends_with("+dba");
    std::string src = dba ? source.substr(0, source.size() - 4) : source, name = dba ? src + "_dba" : src;
    fs::path p = d / (name + "_v2.parquet");
    data_test::write_raw(p, to_data_page_v2(bytes_of(dir / (src + ".parquet")), dba));
    auto r = cli_test::run_cmd("cd " + kClients + " && node parquet_fixtures.mjs --read " + p.string() + " text > " +
                               (d / (name + ".expected")).string());
    ASSERT_EQ(r.status, 0) << "DuckDB does not read the rewritten file: " << r.out;
    Expected want = expected(d, name), before = expected(dir, src);
    EXPECT_EQ(want.texts, before.texts) << "DuckDB reads the rewritten file as the original";
    CorpusStats st;
    EXPECT_EQ(read_docs({p.string()}, "text", st), want.texts) << name;
    EXPECT_EQ(st.null_texts, want.nulls) << name;
    ParquetFile pf(p.string(), "text");
    ParquetPageCounts pages;
    pf.read_row_group(0, &pages);
    EXPECT_GE(pages.v2, 2) << name;
    EXPECT_EQ(pages.v1, 0) << name;
  }
}

TEST(DataParquet, ReadsWhatDuckDBReads) {
  NEED_FIXTURES(dir);
  int checked = 0;
  for (const auto& f : fixture_list(dir)) {
    if (f["column"].is_null()) continue;
    std::string name = f["name"], column = f["column"];
    fs::path file = dir / (name + ".parquet");
    Expected want = expected(dir, name);
    for (int threads : {1, 3}) {
      CorpusStats st;
      std::vector<std::string> got = read_docs({file.string()}, column, st, threads);
      ASSERT_EQ(got.size(), want.texts.size()) << name;
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want.texts[i]) << name << " document " << i;
      EXPECT_EQ(st.null_texts, want.nulls) << name;
      EXPECT_EQ(st.documents, int64_t(want.texts.size())) << name;
      EXPECT_EQ(st.files, 1) << name;
      EXPECT_EQ(st.input_bytes, int64_t(fs::file_size(file))) << name;
    }
    // The page versions the writer was asked for are the ones in the file.
    ParquetFile pf(file.string(), column);
    ParquetPageCounts pages;
    for (size_t g = 0; g < pf.row_groups(); ++g) pf.read_row_group(g, &pages);
    auto opts = f["options"];
    // DuckDB writes v1 data page headers also with PARQUET_VERSION v2 (whose values it encodes
    // as DELTA_LENGTH_BYTE_ARRAY); DATA_PAGE_V2 pages are checked in ReadsDataPageV2AsDuckDBDoes.
    if (pf.row_groups() > 0) {
      EXPECT_GT(pages.v1, 0) << name;
    }
    EXPECT_EQ(pages.v2, 0) << name;
    bool dict = false;
    for (const auto& e : f["encodings"]) dict |= e.get<std::string>().find("DICTIONARY") != std::string::npos;
    EXPECT_EQ(pages.dictionary > 0, dict) << name;
    if (opts.value("ROW_GROUP_SIZE", 0) == 2048) {
      EXPECT_EQ(pf.row_groups(), 3u) << name;
    }
    if (name == "mixed_large_groups") {
      EXPECT_EQ(pf.row_groups(), 1u);
    }
    ++checked;
  }
  EXPECT_GE(checked, 15);
}

TEST(DataParquet, FixturesCoverEncodingsAndCodecs) {
  NEED_FIXTURES(dir);
  std::set<std::string> encodings, codecs;
  for (const auto& f : fixture_list(dir)) {
    for (const auto& e : f["encodings"]) encodings.insert(e.get<std::string>());
    if (f["options"].contains("COMPRESSION")) codecs.insert(f["options"]["COMPRESSION"].get<std::string>());
  }
  for (const char* e : {"PLAIN", "PLAIN_DICTIONARY", "RLE_DICTIONARY", "DELTA_LENGTH_BYTE_ARRAY"})
    EXPECT_TRUE(encodings.count(e)) << e;
  for (const char* c : {"uncompressed", "snappy", "gzip", "zstd"}) EXPECT_TRUE(codecs.count(c)) << c;
}

TEST(DataParquet, FolderReadsInOrderWithAnyThreadCount) {
  NEED_FIXTURES(dir);
  fs::path d = data_test::temp_dir("parquet_folder");
  std::vector<std::string> want;
  for (const char* n : {"mixed_gzip_v2", "repeated_v1", "unique_v2", "mixed_large_groups"}) {
    fs::copy_file(dir / (std::string(n) + ".parquet"), d / (std::string(n) + ".parquet"));
  }
  std::vector<std::string> files = expand_inputs({d.string()});
  ASSERT_EQ(files.size(), 4u);
  for (const auto& f : files) {
    std::string n = fs::path(f).stem().string();
    for (auto& t : expected(dir, n).texts) want.push_back(t);
  }
  for (int threads : {1, 2, 8}) {
    CorpusStats st;
    EXPECT_EQ(read_docs(files, "text", st, threads), want) << threads;
    EXPECT_EQ(st.files, 4);
  }
  // Stopping early stops cleanly.
  CorpusOptions o;
  int seen = 0;
  for_each_document(files, [&](std::string_view) { return ++seen < 5; }, nullptr, o);
  EXPECT_EQ(seen, 5);
  auto globbed = expand_inputs({(d / "*.parquet").string()});
  EXPECT_EQ(globbed, files);
}

TEST(DataParquet, RefusesFilesWithoutAUsableTextColumn) {
  NEED_FIXTURES(dir);
  std::string e = error_of(dir / "no_text.parquet");
  EXPECT_EQ(e, (dir / "no_text.parquet").string() + " has no column 'text' (its columns: id, body)");
  e = error_of(dir / "nested_text.parquet");
  EXPECT_NE(e.find("column 'text' is nested or repeated"), std::string::npos) << e;
  e = error_of(dir / "int_text.parquet");
  EXPECT_NE(e.find("column 'text' holds INT64, not strings"), std::string::npos) << e;
  EXPECT_EQ(error_of(dir / "no_text.parquet", "body"), "");
  e = error_of(dir / "mixed_zstd_v1.parquet", "tags");
  EXPECT_NE(e.find("nested or repeated"), std::string::npos) << e;
  e = error_of(dir / "mixed_zstd_v1.parquet", "meta");
  EXPECT_NE(e.find("nested or repeated"), std::string::npos) << e;
}

TEST(DataParquet, CorruptFilesGiveOneLineErrors) {
  NEED_FIXTURES(dir);
  fs::path d = data_test::temp_dir("parquet_corrupt");
  const std::string good = bytes_of(dir / "required.parquet");
  auto variant = [&](const std::string& name, std::string b) {
    fs::path p = d / (name + ".parquet");
    data_test::write_raw(p, b);
    return p;
  };
  ASSERT_EQ(error_of(dir / "required.parquet"), "");
  const uint32_t footer = uint32_t(uint8_t(good[good.size() - 8])) | uint32_t(uint8_t(good[good.size() - 7])) << 8 |
                          uint32_t(uint8_t(good[good.size() - 6])) << 16;
  const size_t footer_at = good.size() - 8 - footer;

  std::string b = good;
  b.replace(0, 4, "PAR0");
  expect_one_line_error(variant("bad_magic", b), "is not a Parquet file");

  b = good;
  b[b.size() - 5] = char(0x7F);  // footer length ~2 GB
  expect_one_line_error(variant("footer_past_file", b), "footer length");

  b = good.substr(0, 20) + good.substr(footer_at);  // data cut, footer kept
  expect_one_line_error(variant("truncated", b), "lies outside the data");

  expect_one_line_error(variant("too_short", "PAR1PAR1"), "too short");

  // The first data page (the text column comes first) claims more bytes than its chunk holds.
  HeaderSpot s = page_at(good, 4);
  b = good;
  for (size_t i = 0; i < s.size_len; ++i) b[s.size_pos + i] = char(i + 1 < s.size_len ? 0xFE : 0x7E);
  expect_one_line_error(variant("page_past_chunk", b), "runs past the column chunk");

  // A page cut short: its compressed size one byte smaller than what was written.
  b = good;
  {
    std::string v;
    uint64_t z = uint64_t(s.h.compressed_size - 1) << 1;
    do {
      v += char((z & 0x7F) | (z > 0x7F ? 0x80 : 0));
      z >>= 7;
    } while (z);
    ASSERT_EQ(v.size(), s.size_len);
    b.replace(s.size_pos, s.size_len, v);
  }
  expect_one_line_error(variant("truncated_page", b), "corrupt Parquet file");

  // Compressed bytes that are not zstd.
  b = good;
  b.replace(4 + s.h.header_bytes, 4, "\x01\x02\x03\x04");
  expect_one_line_error(variant("bad_zstd", b), "ZSTD");

  // An absurd count: the schema list says it has 2^31 elements.
  b = good;
  ASSERT_EQ(uint8_t(b[footer_at + 2]), 0x19);  // field 1 (version, 2 bytes), then field 2: a list
  uint8_t list = uint8_t(b[footer_at + 3]);
  std::string huge = std::string(1, char(0xF0 | (list & 0x0F))) + "\xFF\xFF\xFF\xFF\x07";
  b.replace(footer_at + 3, 1, huge);
  uint32_t nf = footer + uint32_t(huge.size() - 1);
  for (int i = 0; i < 4; ++i) b[b.size() - 8 + size_t(i)] = char(nf >> (8 * i));
  expect_one_line_error(variant("absurd_count", b), "list longer than the data left");

  // A dictionary index past the dictionary: the indices become one run of index 200.
  const std::string dict = bytes_of(dir / "repeated_plain_v1.parquet");
  HeaderSpot dh = page_at(dict, 4);
  ASSERT_EQ(dh.h.type, parquet::kDictionaryPage);
  size_t data_at = 4 + dh.h.header_bytes + size_t(dh.h.compressed_size);
  HeaderSpot ph = page_at(dict, data_at);
  ASSERT_EQ(ph.h.type, parquet::kDataPage);
  size_t body = data_at + ph.h.header_bytes;
  uint32_t levels = uint32_t(uint8_t(dict[body])) | uint32_t(uint8_t(dict[body + 1])) << 8;
  b = dict;
  b.replace(body + 4 + levels, 3, "\x08\x14\xC8");  // bit width 8, a run of 10, value 200
  expect_one_line_error(variant("bad_dict_index", b), "dictionary index 200 past the dictionary's 6 entries");

  // Nothing was misread along the way: the good files still read.
  EXPECT_EQ(error_of(dir / "repeated_plain_v1.parquet"), "");
}

TEST(DataParquet, PrepareReadsAFolderAndRefusesABadOne) {
  NEED_FIXTURES(dir);
  fs::path d = data_test::temp_dir("parquet_prepare");
  fs::create_directories(d / "good");
  fs::copy_file(dir / "mixed_snappy_v1.parquet", d / "good" / "a.parquet");
  fs::copy_file(dir / "repeated_v2.parquet", d / "good" / "b.parquet");
  const std::string tok = "--vocab-size 300";  // a small BPE trained on the files themselves
  std::string out;
  int rc = cli_test::run_clocklm("prepare --quiet --input " + (d / "good").string() + " " + tok +
                                     " --val-fraction 0.1 --out " + (d / "ds").string(),
                                 &out);
  ASSERT_EQ(rc, 0) << out;
  auto m = nlohmann::json::parse(read_file((d / "ds" / "manifest.json").string()));
  Expected a = expected(dir, "mixed_snappy_v1"), bb = expected(dir, "repeated_v2");
  int64_t docs = m["splits"]["train"]["documents"].get<int64_t>() + m["splits"]["val"]["documents"].get<int64_t>() +
                 m["splits"]["train"]["empty_documents"].get<int64_t>() + m["splits"]["val"]["empty_documents"].get<int64_t>();
  EXPECT_EQ(docs, int64_t(a.texts.size() + bb.texts.size()));
  EXPECT_EQ(m["null_texts"].get<int64_t>(), a.nulls + bb.nulls);
  EXPECT_EQ(m["parameters"]["text_column"], "text");

  // The same folder plus a corrupt file: non-zero exit, one line naming it, nothing written.
  fs::create_directories(d / "bad");
  fs::copy_file(dir / "mixed_snappy_v1.parquet", d / "bad" / "a.parquet");
  std::string broken = bytes_of(dir / "repeated_v2.parquet");
  broken.resize(broken.size() - 3);
  data_test::write_raw(d / "bad" / "b.parquet", broken);
  rc = cli_test::run_clocklm("prepare --quiet --input " + (d / "bad").string() + " " + tok + " --out " +
                                 (d / "ds_bad").string(),
                             &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find((d / "bad" / "b.parquet").string()), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_FALSE(fs::exists(d / "ds_bad"));
  for (const auto& e : fs::directory_iterator(d))
    EXPECT_EQ(e.path().filename().string().find("ds_bad.partial"), std::string::npos) << e.path();

  // Another column by name.
  rc = cli_test::run_clocklm("prepare --quiet --input " + (dir / "body_column.parquet").string() + " " +
                                 tok + " --val-fraction 0.2 --text-column body --out " + (d / "ds_body").string(),
                             &out);
  ASSERT_EQ(rc, 0) << out;
  m = nlohmann::json::parse(read_file((d / "ds_body" / "manifest.json").string()));
  EXPECT_EQ(m["splits"]["train"]["documents"].get<int64_t>() + m["splits"]["val"]["documents"].get<int64_t>(), 50);
  EXPECT_EQ(m["preparation"]["text_column"], "body");
}

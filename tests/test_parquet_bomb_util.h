// Builders of hostile Parquet files for the tests (and the fuzz seeds written from them): whole files of one required text column
// whose pages are made by hand: a delta-encoded page of tens of millions of empty values, three
// row groups sharing one column chunk, and a 1 MiB dictionary entry repeated by one RLE run.
// Each file is a few hundred bytes to about a kilobyte.
#pragma once
#include <zstd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "test_thrift_util.h"

namespace bomb {

using Compact = thrift_test::Compact;

enum { kPlain = 0, kDeltaLength = 6, kDeltaByteArray = 7, kRleDictionary = 8 };
enum { kUncompressed = 0, kZstd = 6 };

// DELTA_BINARY_PACKED of `n` zeros: blocks of 2^20 values in one miniblock of bit width 0, so
// each block takes two bytes whatever it holds.
inline std::string delta_zeros(uint64_t n) {
  Compact w;
  const uint64_t block = uint64_t(1) << 20;
  w.varint(block), w.varint(1), w.varint(n), w.varint(0);
  for (uint64_t done = 1; done < n; done += block) w.varint(0), w.out += '\0';
  return w.out;
}

// A page: its header then its (stored) body. `raw` is the body's size before compression.
inline std::string page(int type, const std::string& stored, size_t raw, int64_t values, int encoding) {
  Compact w;
  w.i32(1, type);
  w.i32(2, int64_t(raw));
  w.i32(3, int64_t(stored.size()));
  w.begin(type == 2 ? 7 : 5);  // dictionary_page_header or data_page_header
  w.i32(1, values);
  w.i32(2, encoding);
  if (type == 0) w.i32(3, 3), w.i32(4, 3);  // RLE levels (none are stored: the column is required)
  w.end();
  w.end();
  return w.out + stored;
}

inline std::string zstd(const std::string& raw) {
  std::string out(ZSTD_compressBound(raw.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), 19));
  return out;
}

// One column chunk as the footer describes it.
struct Chunk {
  int64_t offset;        // data page (after the dictionary page, when there is one)
  int64_t dict_offset;   // -1: none
  int64_t bytes;         // total_compressed_size
  int64_t values;
  int codec;
  std::vector<int> encodings;
};

// "PAR1" + chunk bytes + the footer of a file of one required BYTE_ARRAY column "text", with one
// row group per entry of `groups` (all of them starting at byte 4 unless they say otherwise).
inline std::string file(const std::string& chunks, const std::vector<Chunk>& groups) {
  Compact w;
  int64_t rows = 0;
  for (const Chunk& c : groups) rows += c.values;
  w.i32(1, 1);
  w.list(2, Compact::kStruct, 2);
  w.begin_element(), w.binary(4, "schema"), w.i32(5, 1), w.end();
  w.begin_element(), w.i32(1, 6), w.i32(3, 0), w.binary(4, "text"), w.end();
  w.i64(3, rows);
  w.list(4, Compact::kStruct, groups.size());
  for (const Chunk& c : groups) {
    w.begin_element();
    w.list(1, Compact::kStruct, 1);
    w.begin_element();
    w.i64(2, c.offset);
    w.begin(3);
    w.i32(1, 6);
    w.list(2, Compact::kI32, c.encodings.size());
    for (int e : c.encodings) w.zigzag(e);
    w.list(3, Compact::kBinary, 1), w.varint(4), w.out += "text";
    w.i32(4, c.codec);
    w.i64(5, c.values);
    w.i64(6, c.bytes);
    w.i64(7, c.bytes);
    w.i64(9, c.offset);
    if (c.dict_offset >= 0) w.i64(11, c.dict_offset);
    w.end();
    w.end();  // ColumnChunk
    w.i64(2, c.bytes);
    w.i64(3, c.values);
    w.end();  // RowGroup
  }
  w.out += '\0';
  const uint32_t n = uint32_t(w.out.size());
  std::string le{char(n), char(n >> 8), char(n >> 16), char(n >> 24)};
  return "PAR1" + chunks + w.out + le + "PAR1";
}

// A page of `n` empty values in DELTA_BYTE_ARRAY (prefix and suffix lengths, all zero) or
// DELTA_LENGTH_BYTE_ARRAY (lengths, all zero), as the one page of `groups` row groups that all
// point at it (more than one: the shared-chunk file).
inline std::string delta_bomb(int encoding, int64_t n, int groups = 1) {
  std::string body = encoding == kDeltaByteArray ? delta_zeros(uint64_t(n)) + delta_zeros(uint64_t(n))
                                                 : delta_zeros(uint64_t(n));
  std::string chunk = page(0, body, body.size(), n, encoding);
  Chunk c{4, -1, int64_t(chunk.size()), n, kUncompressed, {encoding}};
  return file(chunk, std::vector<Chunk>(size_t(groups), c));
}

// A ZSTD dictionary of one entry of `entry_bytes` bytes, and a data page whose RLE_DICTIONARY
// indices are one run of `n` zeros.
inline std::string dictionary_bomb(uint32_t entry_bytes, int64_t n) {
  std::string dict_raw{char(entry_bytes), char(entry_bytes >> 8), char(entry_bytes >> 16), char(entry_bytes >> 24)};
  dict_raw += std::string(entry_bytes, 'a');
  std::string dict = page(2, zstd(dict_raw), dict_raw.size(), 1, kPlain);
  Compact run;
  run.out += char(1);  // bit width
  run.varint(uint64_t(n) << 1);
  run.out += '\0';
  std::string data = page(0, zstd(run.out), run.out.size(), n, kRleDictionary);
  Chunk c{4 + int64_t(dict.size()), 4, int64_t(dict.size() + data.size()), n, kZstd, {kPlain, kRleDictionary}};
  return file(dict + data, {c});
}

}  // namespace bomb

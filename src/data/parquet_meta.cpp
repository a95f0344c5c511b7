// Parquet footer and page header parsing (see parquet_meta.h). Field ids follow the Parquet
// format's parquet.thrift; only the fields a text-column reader uses are kept.
#include "data/parquet_meta.h"

#include "core/common.h"
#include "data/thrift_compact.h"

namespace clm::parquet {

const char* codec_name(int codec) {
  static const char* names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
  return codec >= 0 && codec < 8 ? names[codec] : "unknown";
}

const char* encoding_name(int e) {
  static const char* names[] = {"PLAIN", "GROUP_VAR_INT", "PLAIN_DICTIONARY", "RLE", "BIT_PACKED",
                                "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
                                "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
  return e >= 0 && e < 10 ? names[e] : "unknown";
}

const char* type_name(int t) {
  static const char* names[] = {"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY",
                                "FIXED_LEN_BYTE_ARRAY"};
  return t >= 0 && t < 8 ? names[t] : t == -1 ? "group" : "unknown";
}

namespace {

// Reads a list of structs, calling item(r) for each element.
template <typename F>
void read_struct_list(ThriftReader& r, uint8_t type, F&& item) {
  uint8_t et;
  uint32_t n = r.read_list(type, et);
  if (n > 0 && et != thrift::kStruct) r.error("list of structs expected");
  for (uint32_t i = 0; i < n; ++i) item(r);
}

SchemaElement read_schema_element(ThriftReader& r) {
  SchemaElement s;
  bool named = false;
  r.read_struct([&](int16_t id, uint8_t t) {
    switch (id) {
      case 1: s.type = r.read_i32(t); break;
      case 3: s.repetition = r.read_i32(t); break;
      case 4: s.name = std::string(r.read_binary(t)), named = true; break;
      case 5: s.num_children = r.read_i32(t); break;
      default: r.skip(t);
    }
  });
  // Required fields are checked as each element ends, so that a run of empty structs cannot
  // make many elements out of few bytes.
  if (!named) r.error("schema element without a name");
  return s;
}

void read_column_meta(ThriftReader& r, ColumnChunk& c) {
  r.read_struct([&](int16_t id, uint8_t t) {
    switch (id) {
      case 1: c.type = r.read_i32(t); break;
      case 3: {
        uint8_t et;
        uint32_t n = r.read_list(t, et);
        for (uint32_t i = 0; i < n; ++i) c.path.emplace_back(r.read_binary(et));
        break;
      }
      case 4: c.codec = r.read_i32(t); break;
      case 5: c.num_values = r.read_int(t); break;
      case 7: c.total_compressed_size = r.read_int(t); break;
      case 9: c.data_page_offset = r.read_int(t); break;
      case 11: c.dictionary_page_offset = r.read_int(t); break;
      default: r.skip(t);
    }
  });
}

ColumnChunk read_column_chunk(ThriftReader& r) {
  ColumnChunk c;
  r.read_struct([&](int16_t id, uint8_t t) {
    switch (id) {
      case 1: c.external = true; r.skip(t); break;
      case 3:
        if (t != thrift::kStruct) r.error("column metadata is not a struct");
        read_column_meta(r, c);
        break;
      case 8:
      case 9: c.encrypted = true; r.skip(t); break;
      default: r.skip(t);
    }
  });
  if (c.type < 0 && !c.encrypted) r.error("column chunk without metadata");
  return c;
}

RowGroup read_row_group(ThriftReader& r) {
  RowGroup g;
  r.read_struct([&](int16_t id, uint8_t t) {
    switch (id) {
      case 1: read_struct_list(r, t, [&](ThriftReader& rr) { g.columns.push_back(read_column_chunk(rr)); }); break;
      case 3: g.num_rows = r.read_int(t); break;
      default: r.skip(t);
    }
  });
  if (g.num_rows < 0) r.error("row group without a row count");
  return g;
}

void read_data_page_v1(ThriftReader& r, PageHeader& h) {
  r.read_struct([&](int16_t id, uint8_t t) {
    switch (id) {
      case 1: h.num_values = r.read_i32(t); break;
      case 2: h.encoding = r.read_i32(t); break;
      case 3: h.def_encoding = r.read_i32(t); break;
      case 4: h.rep_encoding = r.read_i32(t); break;
      default: r.skip(t);
    }
  });
}

void read_data_page_v2(ThriftReader& r, PageHeader& h) {
  r.read_struct([&](int16_t id, uint8_t t) {
    switch (id) {
      case 1: h.num_values = r.read_i32(t); break;
      case 4: h.encoding = r.read_i32(t); break;
      case 5: h.def_levels_bytes = r.read_i32(t); break;
      case 6: h.rep_levels_bytes = r.read_i32(t); break;
      case 7: h.v2_compressed = r.read_bool(t); break;
      default: r.skip(t);
    }
  });
}

void read_dictionary_page(ThriftReader& r, PageHeader& h) {
  r.read_struct([&](int16_t id, uint8_t t) {
    switch (id) {
      case 1: h.num_values = r.read_i32(t); break;
      case 2: h.encoding = r.read_i32(t); break;
      default: r.skip(t);
    }
  });
}

}  // namespace

FileMetaData parse_file_metadata(const uint8_t* data, size_t size, const std::string& what) {
  ThriftReader r(data, size, what);
  FileMetaData m;
  r.read_struct([&](int16_t id, uint8_t t) {
    switch (id) {
      case 2: read_struct_list(r, t, [&](ThriftReader& rr) { m.schema.push_back(read_schema_element(rr)); }); break;
      case 3: m.num_rows = r.read_int(t); break;
      case 4: read_struct_list(r, t, [&](ThriftReader& rr) { m.row_groups.push_back(read_row_group(rr)); }); break;
      case 8: m.encrypted = true; r.skip(t); break;
      default: r.skip(t);
    }
  });
  return m;
}

PageHeader parse_page_header(const uint8_t* data, size_t size, const std::string& what) {
  ThriftReader r(data, size, what);
  PageHeader h;
  r.read_struct([&](int16_t id, uint8_t t) {
    auto sub = [&](void (*fn)(ThriftReader&, PageHeader&)) {
      if (t != thrift::kStruct) r.error("page header part is not a struct");
      fn(r, h);
    };
    switch (id) {
      case 1: h.type = r.read_i32(t); break;
      case 2: h.uncompressed_size = r.read_i32(t); break;
      case 3: h.compressed_size = r.read_i32(t); break;
      case 5: sub(read_data_page_v1); break;
      case 7: sub(read_dictionary_page); break;
      case 8: sub(read_data_page_v2); break;
      default: r.skip(t);
    }
  });
  h.header_bytes = r.position();
  return h;
}

}  // namespace clm::parquet

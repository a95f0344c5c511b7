// Parquet metadata: the parts of the footer (FileMetaData) and of page headers that a reader of
// one text column needs, parsed from the Thrift compact protocol. Unknown fields are skipped;
// fields of the wrong type, impossible counts and truncation throw clm::Error.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace clm::parquet {

// Enum values as the Parquet format defines them.
enum PhysicalType { kBoolean = 0, kInt32 = 1, kInt64 = 2, kInt96 = 3, kFloat = 4, kDouble = 5,
                    kByteArray = 6, kFixedLenByteArray = 7 };
enum Repetition { kRequired = 0, kOptional = 1, kRepeated = 2 };
enum Codec { kUncompressed = 0, kSnappy = 1, kGzip = 2, kLzo = 3, kBrotli = 4, kLz4 = 5, kZstd = 6, kLz4Raw = 7 };
enum PageType { kDataPage = 0, kIndexPage = 1, kDictionaryPage = 2, kDataPageV2 = 3 };
enum Encoding { kPlain = 0, kPlainDictionary = 2, kRle = 3, kBitPacked = 4, kDeltaBinaryPacked = 5,
                kDeltaLengthByteArray = 6, kDeltaByteArray = 7, kRleDictionary = 8, kByteStreamSplit = 9 };

const char* codec_name(int codec);
const char* encoding_name(int encoding);
const char* type_name(int physical_type);

struct SchemaElement {
  std::string name;
  int type = -1;             // PhysicalType; -1 for a group
  int repetition = -1;       // Repetition; -1 when absent (the root)
  int32_t num_children = 0;  // > 0 for a group
};

struct ColumnChunk {
  bool external = false;  // its data lives in another file (file_path set)
  bool encrypted = false;
  int type = -1;
  int codec = -1;
  std::vector<std::string> path;  // path_in_schema
  int64_t num_values = -1;
  int64_t total_compressed_size = -1;
  int64_t data_page_offset = -1;
  int64_t dictionary_page_offset = -1;  // -1 when absent
};

struct RowGroup {
  int64_t num_rows = -1;
  std::vector<ColumnChunk> columns;
};

struct FileMetaData {
  std::vector<SchemaElement> schema;  // depth-first; schema[0] is the root
  int64_t num_rows = -1;
  std::vector<RowGroup> row_groups;
  bool encrypted = false;  // an encryption algorithm is named (plaintext-footer encryption)
};

struct PageHeader {
  int type = -1;
  int32_t uncompressed_size = -1;
  int32_t compressed_size = -1;
  int32_t num_values = -1;
  int encoding = -1;
  int def_encoding = kRle;  // v1 pages
  int rep_encoding = kRle;  // v1 pages
  int32_t def_levels_bytes = 0;  // v2 pages
  int32_t rep_levels_bytes = 0;  // v2 pages
  bool v2_compressed = true;     // v2 pages: whether the values section is compressed
  size_t header_bytes = 0;       // the header's own length
};

// `what` starts error messages (it names the file). Throws Error.
FileMetaData parse_file_metadata(const uint8_t* data, size_t size, const std::string& what);
PageHeader parse_page_header(const uint8_t* data, size_t size, const std::string& what);

}  // namespace clm::parquet

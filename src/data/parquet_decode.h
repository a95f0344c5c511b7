// Decoders of Parquet's value and level encodings that a text column uses: the RLE/bit-packed
// hybrid (definition levels, dictionary indices) and DELTA_BINARY_PACKED (the lengths and
// prefixes of the DELTA_LENGTH_BYTE_ARRAY and DELTA_BYTE_ARRAY encodings). All reads are bounds
// checked; malformed data throws clm::Error prefixed with the caller's description.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace clm::parquet {

// The RLE / bit-packed hybrid encoding of values `bit_width` bits wide (without a length prefix).
class RleHybrid {
 public:
  RleHybrid(const uint8_t* data, size_t size, int bit_width, const std::string* what);
  // The next values: returns n in [1, max] values that all equal *value (a repeated run hands
  // them out in bulk, a bit-packed run one at a time). Throws when the data ends first.
  uint32_t next(uint32_t max, uint32_t& value);

 private:
  void start_run();
  const uint8_t* p_;
  const uint8_t* end_;
  int bw_;
  const std::string* what_;
  bool rle_ = true;
  uint32_t left_ = 0;          // values left in the current run
  uint32_t rle_value_ = 0;
  const uint8_t* packed_ = nullptr;  // bit-packed run: its bytes, how many are present, next index
  size_t packed_bytes_ = 0;
  uint64_t packed_index_ = 0;
};

// DELTA_BINARY_PACKED integers: decodes exactly `count` values (the header must say so) into
// `out` and returns the position just past the encoded data.
const uint8_t* decode_delta_binary_packed(const uint8_t* p, const uint8_t* end, size_t count,
                                          std::vector<int64_t>& out, const std::string& what);

// A ULEB128 varint (at most 10 bytes); advances p.
uint64_t read_uleb(const uint8_t*& p, const uint8_t* end, const std::string& what);

// Value `index` of bit-packed data `bit_width` (<= 64) bits wide, least significant bit first;
// throws when it lies past `size` bytes.
uint64_t unpack_bits(const uint8_t* data, size_t size, uint64_t index, int bit_width, const std::string& what);

}  // namespace clm::parquet

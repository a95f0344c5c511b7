// A minimal writer of the Thrift compact protocol for tests that build Parquet metadata and page
// headers by hand (the Parquet reader's tests and the hostile Parquet files).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace thrift_test {

// Thrift compact protocol output: fields of structs (nested with begin/end) and list headers.
struct Compact {
  enum : uint8_t { kTrue = 1, kFalse = 2, kI32 = 5, kI64 = 6, kBinary = 8, kList = 9, kStruct = 12 };
  std::string out;
  std::vector<int16_t> last{0};

  void varint(uint64_t v) {
    do {
      out += char((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
      v >>= 7;
    } while (v);
  }
  void zigzag(int64_t v) { varint(uint64_t(v) << 1 ^ uint64_t(v >> 63)); }
  void field(int16_t id, uint8_t type) {  // ids ascend by 1..15 within a struct here
    out += char(((id - last.back()) << 4) | type);
    last.back() = id;
  }
  void boolean(int16_t id, bool v) { field(id, v ? kTrue : kFalse); }
  void i32(int16_t id, int64_t v) { field(id, kI32), zigzag(v); }
  void i64(int16_t id, int64_t v) { field(id, kI64), zigzag(v); }
  void binary(int16_t id, const std::string& s) { field(id, kBinary), varint(s.size()), out += s; }
  void list(int16_t id, uint8_t elem, size_t n) {
    field(id, kList);
    if (n < 15) out += char(n << 4 | elem);
    else out += char(0xF0 | elem), varint(n);
  }
  void begin(int16_t id) { field(id, kStruct), last.push_back(0); }
  void begin_element() { last.push_back(0); }  // a struct inside a list
  void end() { out += '\0', last.pop_back(); }
};

}  // namespace thrift_test

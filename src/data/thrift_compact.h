// A bounds-checked reader of the Thrift compact protocol, the encoding of Parquet's footer and page
// headers. It reads fields one at a time; callers pick the fields they know and skip() the rest.
// Every length and count is checked against the bytes that remain, nesting is limited, and any
// violation throws clm::Error prefixed with the caller's description of the data.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace clm {

namespace thrift {
enum Type : uint8_t {
  kStop = 0, kTrue = 1, kFalse = 2, kByte = 3, kI16 = 4, kI32 = 5, kI64 = 6, kDouble = 7,
  kBinary = 8, kList = 9, kSet = 10, kMap = 11, kStruct = 12,
};
}  // namespace thrift

class ThriftReader {
 public:
  // `what` starts every error message (e.g. "corrupt Parquet file x.parquet: footer").
  ThriftReader(const uint8_t* data, size_t size, std::string what);

  // Fields of the struct being read: call begin_struct() when entering one, then next_field()
  // until it returns false (the struct's STOP, which also ends it).
  void begin_struct();
  bool next_field(int16_t& id, uint8_t& type);
  // The struct that starts here, whole: on_field(id, type) for each field, which reads the field
  // or skip()s it.
  template <typename OnField>
  void read_struct(OnField&& on_field) {
    begin_struct();
    int16_t id;
    uint8_t type;
    while (next_field(id, type)) on_field(id, type);
  }

  // Values; `type` is the field's (or list element's) type, checked against what is asked for.
  int64_t read_int(uint8_t type);  // byte, i16, i32 or i64
  int32_t read_i32(uint8_t type);  // an int that must fit 32 bits
  bool read_bool(uint8_t type);    // a struct field's boolean (carried in its type)
  std::string_view read_binary(uint8_t type);
  // A list or set header: the element count (checked to fit in what remains) and element type.
  uint32_t read_list(uint8_t type, uint8_t& elem_type);
  void skip(uint8_t type);

  size_t position() const { return size_t(p_ - begin_); }
  [[noreturn]] void error(std::string_view msg) const;

 private:
  uint64_t varint();
  uint8_t byte();
  void skip_at(uint8_t type, int depth);

  const uint8_t* begin_;
  const uint8_t* p_;
  const uint8_t* end_;
  std::string what_;
  int depth_ = 0;              // structs entered and not yet ended
  int16_t last_id_[64] = {};   // last field id per open struct
};

}  // namespace clm

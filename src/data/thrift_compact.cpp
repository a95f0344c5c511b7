// Thrift compact protocol reader (see thrift_compact.h). Integers are zigzag varints, field ids
// are deltas from the previous field of the same struct, and list headers pack a short count
// with the element type.
#include "data/thrift_compact.h"

#include "core/common.h"

namespace clm {

static constexpr int kMaxDepth = 64;

ThriftReader::ThriftReader(const uint8_t* data, size_t size, std::string what)
    : begin_(data), p_(data), end_(data + size), what_(std::move(what)) {}

void ThriftReader::error(std::string_view msg) const {
  fail("{} ({} at byte {})", what_, msg, position());
}

uint8_t ThriftReader::byte() {
  if (p_ >= end_) error("truncated");
  return *p_++;
}

uint64_t ThriftReader::varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    uint8_t b = byte();
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
  error("varint longer than 10 bytes");
}

void ThriftReader::begin_struct() {
  if (depth_ >= kMaxDepth) error("structs nested too deeply");
  last_id_[depth_++] = 0;
}

bool ThriftReader::next_field(int16_t& id, uint8_t& type) {
  uint8_t h = byte();
  if (h == thrift::kStop) {
    if (depth_ > 0) --depth_;
    return false;
  }
  type = h & 0x0F;
  int16_t& last = last_id_[depth_ > 0 ? depth_ - 1 : 0];
  if (h >> 4) {
    id = int16_t(last + (h >> 4));
  } else {
    uint64_t z = varint();
    int64_t v = int64_t(z >> 1) ^ -int64_t(z & 1);
    if (v < INT16_MIN || v > INT16_MAX) error("field id out of range");
    id = int16_t(v);
  }
  last = id;
  if (type == thrift::kStop || type > thrift::kStruct) error(fmt::format("field {} has unknown type {}", id, type));
  return true;
}

int64_t ThriftReader::read_int(uint8_t type) {
  if (type == thrift::kByte) return int8_t(byte());
  if (type != thrift::kI16 && type != thrift::kI32 && type != thrift::kI64)
    error(fmt::format("integer expected, found type {}", type));
  uint64_t z = varint();
  return int64_t(z >> 1) ^ -int64_t(z & 1);
}

int32_t ThriftReader::read_i32(uint8_t type) {
  int64_t v = read_int(type);
  if (v < INT32_MIN || v > INT32_MAX) error("32-bit integer out of range");
  return int32_t(v);
}

bool ThriftReader::read_bool(uint8_t type) {
  if (type != thrift::kTrue && type != thrift::kFalse) error(fmt::format("boolean expected, found type {}", type));
  return type == thrift::kTrue;
}

std::string_view ThriftReader::read_binary(uint8_t type) {
  if (type != thrift::kBinary) error(fmt::format("string expected, found type {}", type));
  uint64_t n = varint();
  if (n > uint64_t(end_ - p_)) error("string longer than the data left");
  std::string_view s(reinterpret_cast<const char*>(p_), size_t(n));
  p_ += n;
  return s;
}

uint32_t ThriftReader::read_list(uint8_t type, uint8_t& elem_type) {
  if (type != thrift::kList && type != thrift::kSet) error(fmt::format("list expected, found type {}", type));
  uint8_t h = byte();
  uint64_t n = h >> 4;
  if (n == 15) n = varint();
  elem_type = h & 0x0F;
  if (elem_type == thrift::kStop || elem_type > thrift::kStruct) error("list of an unknown type");
  // Every element takes at least one byte (booleans too, in a list).
  if (n > uint64_t(end_ - p_)) error("list longer than the data left");
  return uint32_t(n);
}

void ThriftReader::skip(uint8_t type) { skip_at(type, depth_); }

void ThriftReader::skip_at(uint8_t type, int depth) {
  if (depth >= kMaxDepth) error("values nested too deeply");
  switch (type) {
    case thrift::kTrue:
    case thrift::kFalse: return;  // a struct field's boolean lives in its type
    case thrift::kByte: byte(); return;
    case thrift::kI16:
    case thrift::kI32:
    case thrift::kI64: varint(); return;
    case thrift::kDouble:
      if (end_ - p_ < 8) error("truncated");
      p_ += 8;
      return;
    case thrift::kBinary: read_binary(type); return;
    case thrift::kList:
    case thrift::kSet: {
      uint8_t et;
      uint32_t n = read_list(type, et);
      for (uint32_t i = 0; i < n; ++i) {
        if (et == thrift::kTrue || et == thrift::kFalse) byte();
        else skip_at(et, depth + 1);
      }
      return;
    }
    case thrift::kMap: {
      uint64_t n = varint();
      if (n == 0) return;
      uint8_t kv = byte();
      if (n > uint64_t(end_ - p_)) error("map longer than the data left");
      uint8_t kt = kv >> 4, vt = kv & 0x0F;
      for (uint64_t i = 0; i < n; ++i) {
        for (uint8_t t : {kt, vt}) {
          if (t == thrift::kTrue || t == thrift::kFalse) byte();
          else skip_at(t, depth + 1);
        }
      }
      return;
    }
    case thrift::kStruct: {
      for (;;) {
        uint8_t h = byte();
        if (h == thrift::kStop) return;
        if (!(h >> 4)) read_int(thrift::kI16);  // a long-form field id
        uint8_t t = h & 0x0F;
        if (t == thrift::kStop || t > thrift::kStruct) error("field of an unknown type");
        skip_at(t, depth + 1);
      }
    }
    default: error(fmt::format("unknown type {}", type));
  }
}

}  // namespace clm

// A minimal protocol-buffers wire-format encoder: varint, 32-bit and length-delimited fields
// appended to one byte string, nested messages written bottom-up. Enough to write a schema's
// messages by field number (export/onnx.cpp writes ONNX's ModelProto with it) without the
// protobuf library or generated code.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace clm {

class ProtoWriter {
 public:
  // int32/int64/uint64/bool/enum fields (wire type 0). Negative int64 values take ten bytes, as
  // protobuf encodes them.
  void varint_field(int field, uint64_t v);
  void int_field(int field, int64_t v) { varint_field(field, uint64_t(v)); }
  // float fields (wire type 5, little-endian IEEE 754).
  void float_field(int field, float v);
  // string, bytes and embedded-message fields (wire type 2).
  void bytes_field(int field, std::string_view data);
  void message_field(int field, const ProtoWriter& m) { bytes_field(field, m.buf_); }
  // The tag and length of a length-delimited field whose `len` content bytes the caller appends
  // next with raw() (a large message assembled from parts without copying it into one first).
  void field_header(int field, size_t len);
  // Bytes appended as they are: already-encoded fields.
  void raw(std::string_view encoded) { buf_.append(encoded); }

  const std::string& bytes() const { return buf_; }
  std::string take() { return std::move(buf_); }
  size_t size() const { return buf_.size(); }

 private:
  void varint(uint64_t v);
  void tag(int field, int wire_type) { varint((uint64_t(field) << 3) | uint64_t(wire_type)); }
  std::string buf_;
};

}  // namespace clm

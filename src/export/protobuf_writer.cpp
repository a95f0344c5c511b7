// The protocol-buffers wire-format encoder (see protobuf_writer.h).
#include "export/protobuf_writer.h"

#include <cstring>

namespace clm {

void ProtoWriter::varint(uint64_t v) {
  while (v >= 0x80) {
    buf_.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  buf_.push_back(char(uint8_t(v)));
}

void ProtoWriter::varint_field(int field, uint64_t v) {
  tag(field, 0);
  varint(v);
}

void ProtoWriter::float_field(int field, float v) {
  tag(field, 5);
  uint32_t u;
  std::memcpy(&u, &v, 4);
  for (int i = 0; i < 4; ++i) buf_.push_back(char(uint8_t(u >> (8 * i))));
}

void ProtoWriter::field_header(int field, size_t len) {
  tag(field, 2);
  varint(len);
}

void ProtoWriter::bytes_field(int field, std::string_view data) {
  field_header(field, data.size());
  buf_.append(data);
}

}  // namespace clm

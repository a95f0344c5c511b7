// The ONNX graph builder (see onnx_builder.h). Field numbers are those of onnx.proto (IR version 8):
// ModelProto{ir_version 1, producer_name 2, doc_string 6, graph 7, opset_import 8},
// GraphProto{node 1, name 2, initializer 5, input 11, output 12},
// NodeProto{input 1, output 2, name 3, op_type 4, attribute 5},
// AttributeProto{name 1, f 2, i 3, ints 8, type 20}, TensorProto{dims 1, data_type 2, name 8,
// raw_data 9}, ValueInfoProto{name 1, type 2}, TypeProto{tensor_type 1}, TypeProto.Tensor{elem_type 1,
// shape 2}, TensorShapeProto{dim 1}, Dimension{dim_value 1, dim_param 2}, OperatorSetIdProto{domain 1,
// version 2}.
#include "export/onnx_builder.h"

#include <bit>
#include <cstring>

#include <fmt/format.h>

namespace clm {

static_assert(std::endian::native == std::endian::little, "ONNX raw_data is little-endian");

namespace {
constexpr int64_t kIrVersion = 8;
enum AttrType { kAttrFloat = 1, kAttrInt = 2, kAttrInts = 7 };

ProtoWriter attribute(const OnnxAttr& a) {
  ProtoWriter w;
  w.bytes_field(1, a.name);
  switch (a.kind) {
    case OnnxAttr::Int:
      w.int_field(3, a.i);
      w.int_field(20, kAttrInt);
      break;
    case OnnxAttr::Ints:
      for (int64_t v : a.ints) w.int_field(8, v);
      w.int_field(20, kAttrInts);
      break;
    case OnnxAttr::Float:
      w.float_field(2, a.f);
      w.int_field(20, kAttrFloat);
      break;
  }
  return w;
}
}  // namespace

std::string OnnxGraphBuilder::op(const std::string& op_type, const std::vector<std::string>& inputs,
                                 const std::vector<OnnxAttr>& attrs, const std::string& out) {
  const std::string name = fmt::format("{}_{}", op_type, next_++);
  const std::string result = out.empty() ? name + "_out" : out;
  ProtoWriter n;
  for (const auto& in : inputs) n.bytes_field(1, in);
  n.bytes_field(2, result);
  n.bytes_field(3, name);
  n.bytes_field(4, op_type);
  for (const auto& a : attrs) n.message_field(5, attribute(a));
  nodes_.message_field(1, n);
  return result;
}

std::string OnnxGraphBuilder::init_raw(const std::string& name, OnnxType type, const std::vector<int64_t>& dims,
                                       const void* data, size_t bytes) {
  ProtoWriter t;
  for (int64_t d : dims) t.int_field(1, d);
  t.int_field(2, int64_t(type));
  t.bytes_field(8, name);
  t.bytes_field(9, std::string_view(static_cast<const char*>(data), bytes));
  inits_.message_field(5, t);
  init_bytes_ += int64_t(bytes);
  return name;
}

std::string OnnxGraphBuilder::init_f32(const std::string& name, const std::vector<int64_t>& dims, const float* data) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return init_raw(name, OnnxType::Float, dims, data, size_t(n) * 4);
}

std::string OnnxGraphBuilder::i64s(const std::vector<int64_t>& values) {
  std::string key = "i64v";
  for (int64_t v : values) key += fmt::format("_{}", v);
  auto it = consts_.find(key);
  if (it != consts_.end()) return it->second;
  const std::string name = fmt::format("const_{}", consts_.size());
  init_raw(name, OnnxType::Int64, {int64_t(values.size())}, values.data(), values.size() * 8);
  return consts_[key] = name;
}

std::string OnnxGraphBuilder::i64(int64_t value) {
  const std::string key = fmt::format("i64_{}", value);
  auto it = consts_.find(key);
  if (it != consts_.end()) return it->second;
  const std::string name = fmt::format("const_{}", consts_.size());
  init_raw(name, OnnxType::Int64, {}, &value, 8);
  return consts_[key] = name;
}

std::string OnnxGraphBuilder::f32(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const std::string key = fmt::format("f32_{:08x}", bits);
  auto it = consts_.find(key);
  if (it != consts_.end()) return it->second;
  const std::string name = fmt::format("const_{}", consts_.size());
  init_raw(name, OnnxType::Float, {}, &value, 4);
  return consts_[key] = name;
}

ProtoWriter OnnxGraphBuilder::value_info(const std::string& name, OnnxType type, const std::vector<OnnxDim>& dims) {
  ProtoWriter shape;
  for (const OnnxDim& d : dims) {
    ProtoWriter dim;
    if (d.param.empty()) dim.int_field(1, d.value);
    else dim.bytes_field(2, d.param);
    shape.message_field(1, dim);
  }
  ProtoWriter tensor;
  tensor.int_field(1, int64_t(type));
  tensor.message_field(2, shape);
  ProtoWriter tp;
  tp.message_field(1, tensor);
  ProtoWriter vi;
  vi.bytes_field(1, name);
  vi.message_field(2, tp);
  return vi;
}

void OnnxGraphBuilder::input(const std::string& name, OnnxType type, const std::vector<OnnxDim>& dims) {
  io_.message_field(11, value_info(name, type, dims));
}

void OnnxGraphBuilder::output(const std::string& name, OnnxType type, const std::vector<OnnxDim>& dims) {
  io_.message_field(12, value_info(name, type, dims));
}

std::string OnnxGraphBuilder::model(const std::string& graph_name, int64_t opset, const std::string& producer,
                                    const std::string& doc) const {
  ProtoWriter name;
  name.bytes_field(2, graph_name);
  ProtoWriter m;
  m.int_field(1, kIrVersion);
  m.bytes_field(2, producer);
  m.bytes_field(6, doc);
  ProtoWriter opset_id;
  opset_id.bytes_field(1, "");
  opset_id.int_field(2, opset);
  m.message_field(8, opset_id);
  // The graph is written from its parts (nodes, name, initializers, inputs and outputs) so the
  // weights are copied once, into the file's bytes.
  m.field_header(7, nodes_.size() + name.size() + inits_.size() + io_.size());
  m.raw(nodes_.bytes());
  m.raw(name.bytes());
  m.raw(inits_.bytes());
  m.raw(io_.bytes());
  return m.take();
}

}  // namespace clm

// Building an ONNX model by hand: nodes, initializers (fp32 raw data, int64 constants), graph
// inputs and outputs, each appended to its protobuf field as it is made (export/protobuf_writer.h),
// then one ModelProto (field numbers of onnx.proto, IR version 8). Knows ONNX's schema, not any model.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "export/protobuf_writer.h"

namespace clm {

// TensorProto.DataType values used here.
enum class OnnxType : int { Float = 1, Int64 = 7, Bool = 9 };

struct OnnxAttr {
  enum Kind { Int, Ints, Float } kind = Int;
  std::string name;
  int64_t i = 0;
  std::vector<int64_t> ints;
  float f = 0;
  static OnnxAttr make_int(std::string n, int64_t v) { return {Int, std::move(n), v, {}, 0}; }
  static OnnxAttr make_ints(std::string n, std::vector<int64_t> v) { return {Ints, std::move(n), 0, std::move(v), 0}; }
  static OnnxAttr make_float(std::string n, float v) { return {Float, std::move(n), 0, {}, v}; }
};

// A dimension of a graph input or output: a fixed size, or a symbolic name when `param` is set.
struct OnnxDim {
  int64_t value = 0;
  std::string param;
};

class OnnxGraphBuilder {
 public:
  // A node of the default domain with one output, named `out` or a fresh name; returns it.
  std::string op(const std::string& op_type, const std::vector<std::string>& inputs,
                 const std::vector<OnnxAttr>& attrs = {}, const std::string& out = "");
  // An fp32 initializer (raw little-endian data of prod(dims) floats); returns its name.
  std::string init_f32(const std::string& name, const std::vector<int64_t>& dims, const float* data);
  // Constants as initializers, one per distinct value: an int64 vector (1-D) or scalar (0-D),
  // an fp32 scalar.
  std::string i64s(const std::vector<int64_t>& values);
  std::string i64(int64_t value);
  std::string f32(float value);
  void input(const std::string& name, OnnxType type, const std::vector<OnnxDim>& dims);
  void output(const std::string& name, OnnxType type, const std::vector<OnnxDim>& dims);
  // Bytes of the initializers so far (the protobuf limit is 2 GiB for the whole file).
  int64_t initializer_bytes() const { return init_bytes_; }
  // The serialised ModelProto: this graph under opset `opset` of the default domain.
  std::string model(const std::string& graph_name, int64_t opset, const std::string& producer,
                    const std::string& doc) const;

 private:
  std::string init_raw(const std::string& name, OnnxType type, const std::vector<int64_t>& dims,
                       const void* data, size_t bytes);
  static ProtoWriter value_info(const std::string& name, OnnxType type, const std::vector<OnnxDim>& dims);
  ProtoWriter nodes_, inits_, io_;  // GraphProto fields node (1), initializer (5), input/output (11/12)
  std::map<std::string, std::string> consts_;
  int64_t init_bytes_ = 0;
  int next_ = 0;
};

}  // namespace clm

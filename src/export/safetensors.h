// safetensors files (the format Hugging Face and PyTorch users load weights from): an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape and byte range
// (plus a `__metadata__` map of strings), padded with spaces to a multiple of 8 bytes, then the
// tensors' little-endian bytes back to back in the order given. Written here, never read: the
// readers are the independent ones (python/clocklm_torch.py's own parser is tested against this).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace clm {

// One tensor to write: fp32 host values, row-major.
struct SafeTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

enum class SafeDType { F32, BF16 };  // BF16: each value rounded to nearest even
SafeDType safe_dtype_from_name(const std::string& name);  // fp32 | bf16; throws Error
const char* safe_dtype_name(SafeDType t);                 // "F32" | "BF16" (the header's spelling)

// The JSON header text, padded with spaces to a multiple of 8 bytes (without the length prefix).
// Throws Error on an empty or repeated name, a name starting "__", or a shape that disagrees with
// the data's size.
std::string safetensors_header(const std::vector<SafeTensor>& tensors, SafeDType dt,
                               const std::map<std::string, std::string>& metadata);

// Writes the file at `path` (plain write, fsync; callers put it in a folder they rename into place).
void write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors, SafeDType dt,
                       const std::map<std::string, std::string>& metadata);

}  // namespace clm

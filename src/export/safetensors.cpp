// The safetensors writer (format in safetensors.h and docs/FORMATS.md).
#include "export/safetensors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "backend/dtype.h"
#include "core/common.h"

namespace clm {

SafeDType safe_dtype_from_name(const std::string& name) {
  if (name == "fp32") return SafeDType::F32;
  if (name == "bf16") return SafeDType::BF16;
  fail("unknown export dtype '{}' (fp32 or bf16)", name);
}

const char* safe_dtype_name(SafeDType t) { return t == SafeDType::F32 ? "F32" : "BF16"; }

namespace {

size_t elem_bytes(SafeDType t) { return t == SafeDType::F32 ? 4 : 2; }

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// The tensor's bytes in the file's dtype (little-endian; this code runs on little-endian hosts only,
// as the checkpoint format does).
std::string tensor_bytes(const SafeTensor& t, SafeDType dt) {
  std::string out;
  if (dt == SafeDType::F32) {
    out.assign(reinterpret_cast<const char*>(t.data.data()), t.data.size() * 4);
    return out;
  }
  std::vector<bf16> h(t.data.size());
  for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(t.data[i]);
  out.assign(reinterpret_cast<const char*>(h.data()), h.size() * 2);
  return out;
}

void write_all(std::FILE* f, const std::string& path, const char* p, size_t n) {
  if (n > 0 && std::fwrite(p, 1, n, f) != n) fail("cannot write {}: {}", path, std::strerror(errno));
}

}  // namespace

std::string safetensors_header(const std::vector<SafeTensor>& tensors, SafeDType dt,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t off = 0;
  for (const SafeTensor& t : tensors) {
    if (t.name.empty() || t.name.starts_with("__") || !seen.insert(t.name).second)
      fail("safetensors: bad or repeated tensor name '{}'", t.name);
    if (numel(t.shape) != int64_t(t.data.size()))
      fail("safetensors: tensor {} has {} values but its shape holds {}", t.name, t.data.size(), numel(t.shape));
    const uint64_t n = uint64_t(t.data.size()) * elem_bytes(dt);
    h[t.name] = {{"dtype", safe_dtype_name(dt)}, {"shape", t.shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors, SafeDType dt,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = safetensors_header(tensors, dt, metadata);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail("cannot write {}: {}", path, std::strerror(errno));
  try {
    uint64_t len = header.size();
    char le[8];
    for (int i = 0; i < 8; ++i) le[i] = char((len >> (8 * i)) & 0xff);
    write_all(f, path, le, 8);
    write_all(f, path, header.data(), header.size());
    for (const SafeTensor& t : tensors) {
      const std::string b = tensor_bytes(t, dt);
      write_all(f, path, b.data(), b.size());
    }
    if (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0) fail("cannot write {}: {}", path, std::strerror(errno));
  } catch (...) {
    std::fclose(f);
    throw;
  }
  if (std::fclose(f) != 0) fail("cannot write {}: {}", path, std::strerror(errno));
}

}  // namespace clm

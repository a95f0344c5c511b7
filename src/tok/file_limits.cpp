// The checks behind the tokenizer file limits (see file_limits.h).
#include "tok/file_limits.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/common.h"

namespace clm {

void check_tokenizer_size(uint64_t size, const std::string& what) {
  if (size > kMaxTokenizerFileBytes)
    fail("{}: {} bytes is larger than a tokenizer file may be ({} MiB)", what, size, kMaxTokenizerFileBytes >> 20);
}

void check_token_size(size_t size, const std::string& what, const std::string& where) {
  if (size > kMaxTokenBytes)
    fail("{}: {}: a token of {} bytes is longer than a token may be ({} bytes)", what, where, size, kMaxTokenBytes);
}

std::string read_tokenizer_file(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec) check_tokenizer_size(size, path);
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read {}: {}", path, std::strerror(errno));
  // Read in blocks, checking as it grows: a device or a pipe has no size to check up front.
  std::string text;
  if (!ec) text.reserve(size_t(size));
  std::vector<char> buf(size_t(1) << 20);
  while (f.read(buf.data(), std::streamsize(buf.size())) || f.gcount() > 0) {
    text.append(buf.data(), size_t(f.gcount()));
    check_tokenizer_size(text.size(), path);
  }
  if (f.bad()) fail("cannot read {}: {}", path, std::strerror(errno));
  return text;
}

}  // namespace clm

// Token shards (write, memory-map, validate) and the manifest side of a prepared dataset folder.
// The binary layout is specified in docs/FORMATS.md; every check here has a one-line error that
// names the file, because a corrupt shard found mid-training is otherwise very hard to trace.
#include "data/dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/common.h"
#include "core/json_get.h"
#include "core/json_parse.h"

namespace clm {

namespace fs = std::filesystem;

static constexpr char kMagic[8] = {'C', 'L', 'M', 'T', 'O', 'K', 'S', '\0'};

static void put_u32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }  // little-endian hosts only
static void put_u64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }

static void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("cannot write {}: {}", path, std::strerror(errno));
    }
    p += w;
    n -= size_t(w);
  }
}

// ---- writer ---------------------------------------------------------------------------------

ShardWriter::ShardWriter(const std::string& p, uint32_t vs)
    : path(p), vocab_size(vs), width(shard_width_for(vs)) {
  if (vs == 0) fail("cannot write shard {}: vocab_size is 0", p);
  fs::path fp(p);
  fs::path dir = fp.parent_path().empty() ? fs::path(".") : fp.parent_path();
  tmp = (dir / ("." + fp.filename().string() + ".tmp." + std::to_string(getpid()))).string();
  fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("cannot write {}: {}", tmp, std::strerror(errno));
  char header[kShardHeaderBytes] = {};
  write_all(fd, header, sizeof header, tmp);  // patched in finish()
  buf.reserve(1 << 22);
}

ShardWriter::~ShardWriter() {
  if (fd >= 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
  }
}

void ShardWriter::append(const uint32_t* tokens, size_t n) {
  while (n > 0) {
    size_t take = std::min<size_t>(n, 1 << 20);
    uint32_t mx = 0;
    for (size_t i = 0; i < take; ++i) mx = std::max(mx, tokens[i]);
    if (mx >= vocab_size) fail("cannot write shard {}: token id {} >= vocab_size {}", path, mx, vocab_size);
    size_t old = buf.size();
    buf.resize(old + take * width);
    if (width == 2) {
      uint16_t* d = reinterpret_cast<uint16_t*>(buf.data() + old);  // buf holds only whole tokens
      for (size_t i = 0; i < take; ++i) d[i] = uint16_t(tokens[i]);
    } else {
      std::memcpy(buf.data() + old, tokens, take * 4);
    }
    if (buf.size() >= (1u << 22)) {
      write_all(fd, buf.data(), buf.size(), tmp);
      buf.clear();
    }
    tokens += take;
    n -= take;
    n_tokens += take;
  }
}

void ShardWriter::finish() {
  if (fd < 0) fail("shard {} already finished", path);
  write_all(fd, buf.data(), buf.size(), tmp);
  buf.clear();
  char header[kShardHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  put_u32(header + 8, kShardVersion);
  put_u32(header + 12, width);
  put_u64(header + 16, n_tokens);
  put_u32(header + 24, vocab_size);
  if (::pwrite(fd, header, sizeof header, 0) != ssize_t(sizeof header))
    fail("cannot write {}: {}", tmp, std::strerror(errno));
  if (::fsync(fd) != 0) fail("cannot flush {}: {}", tmp, std::strerror(errno));
  ::close(fd);
  fd = -1;
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("cannot rename {} to {}: {}", tmp, path, std::strerror(e));
  }
}

void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, uint32_t vocab_size) {
  ShardWriter w(path, vocab_size);
  w.append(tokens.data(), tokens.size());
  w.finish();
}

// ---- reader ---------------------------------------------------------------------------------

ShardHeader parse_shard_header(const void* data, uint64_t fsize, const std::string& p) {
  if (fsize < kShardHeaderBytes)
    fail("{} is not a clocklm token shard: {} bytes, shorter than the {}-byte header", p, fsize,
         kShardHeaderBytes);
  const char* h = static_cast<const char*>(data);
  if (std::memcmp(h, kMagic, 8) != 0) fail("{} is not a clocklm token shard (bad magic)", p);
  uint32_t version, width, vocab;
  uint64_t n;
  std::memcpy(&version, h + 8, 4);
  std::memcpy(&width, h + 12, 4);
  std::memcpy(&n, h + 16, 8);
  std::memcpy(&vocab, h + 24, 4);
  if (version != kShardVersion)
    fail("{} has shard format version {}, this clocklm reads version {}", p, version, kShardVersion);
  if (width != 2 && width != 4) fail("{} has invalid token width {} (expected 2 or 4)", p, width);
  if (vocab == 0 || shard_width_for(vocab) != width)
    fail("{} has vocab_size {}, which does not fit its token width {}", p, vocab, width);
  uint64_t avail = fsize - kShardHeaderBytes;
  if (avail % width != 0 || avail / width != n) {
    if (n > avail / width)
      fail("{} is truncated: header says {} tokens but the file holds only {} bytes of tokens", p, n, avail);
    fail("{} is padded: header says {} tokens but the file holds {} bytes of tokens", p, n, avail);
  }
  return {width, n, vocab};
}

Shard Shard::open(const std::string& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open shard {}: {}", p, std::strerror(errno));
  struct stat sb{};
  if (::fstat(fd, &sb) != 0) {
    int e = errno;
    ::close(fd);
    fail("cannot stat shard {}: {}", p, std::strerror(e));
  }
  uint64_t fsize = uint64_t(sb.st_size);
  if (fsize < kShardHeaderBytes) {  // nothing to map: the header check fails on the size alone
    ::close(fd);
    parse_shard_header(nullptr, fsize, p);
  }
  void* m = ::mmap(nullptr, fsize, PROT_READ, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);
  if (m == MAP_FAILED) fail("cannot map shard {}: {}", p, std::strerror(e));
  std::shared_ptr<void> mapping(m, [fsize](void* q) { ::munmap(q, fsize); });
  ShardHeader hd = parse_shard_header(m, fsize, p);
  Shard s;
  s.path = p;
  s.width = hd.width;
  s.n_tokens = hd.n_tokens;
  s.vocab_size = hd.vocab_size;
  s.data = static_cast<const char*>(m) + kShardHeaderBytes;
  s.mapping = std::move(mapping);
  return s;
}

// ---- dataset folder -------------------------------------------------------------------------

const std::vector<std::string>& DatasetInfo::shards(const std::string& split) const {
  if (split == "train") return train_shards;
  if (split == "val") return val_shards;
  fail("unknown split '{}' (expected train or val)", split);
}

// A shard named in the manifest must be a plain file name inside the dataset folder.
static bool plain_file_name(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
         f.find('\0') == std::string::npos;
}

DatasetInfo parse_dataset_manifest(std::string_view text, const std::string& dir) {
  DatasetInfo info;
  info.dir = dir;
  std::string mpath = (fs::path(dir) / "manifest.json").string();
  try {
    info.manifest = parse_json(text, mpath);
    const auto& tok = info.manifest.at("tokenizer");
    info.bos_id = json_int<uint32_t>(tok.at("bos_id"), mpath + ": tokenizer.bos_id");
    info.vocab_size = json_int<uint32_t>(tok.at("vocab_size"), mpath + ": tokenizer.vocab_size");
    if (tok.contains("hash")) info.tokenizer_hash = json_str(tok["hash"], mpath + ": tokenizer.hash");
    for (const char* split : {"train", "val"}) {
      auto& out = std::string(split) == "train" ? info.train_shards : info.val_shards;
      const auto& shards = info.manifest.at("splits").at(split).at("shards");
      if (!shards.is_array()) fail("{}: splits.{}.shards must be a list", mpath, split);
      for (const auto& sh : shards) {
        const std::string& f = json_str(sh.at("file"), mpath + ": shard file");
        if (!plain_file_name(f)) fail("{}: shard file '{}' is not a file name inside the folder", mpath, f);
        out.push_back((fs::path(dir) / f).string());
      }
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{} is malformed: {}", mpath, e.what());
  }
  if (info.vocab_size == 0 || info.bos_id >= info.vocab_size)
    fail("{}: tokenizer.bos_id {} is not below tokenizer.vocab_size {}", mpath, info.bos_id, info.vocab_size);
  return info;
}

DatasetInfo read_dataset_info(const std::string& dir) {
  std::string mpath = (fs::path(dir) / "manifest.json").string();
  if (!fs::is_directory(dir)) fail("dataset folder {} does not exist", dir);
  if (!fs::exists(mpath))
    fail("{} is not a prepared dataset (no manifest.json); create it with `clocklm prepare --out {}`", dir, dir);
  DatasetInfo info = parse_dataset_manifest(read_file(mpath), dir);
  for (const auto* list : {&info.train_shards, &info.val_shards})
    for (const auto& p : *list)
      if (!fs::exists(p)) fail("dataset {} is incomplete: {} is missing", dir, p);
  return info;
}

}  // namespace clm

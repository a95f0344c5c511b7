// Checkpoint file (see checkpoint.h and docs/CHECKPOINT.md):
//   0  char[8] magic "CLMCKPT\0"     8 u32 version        12 u32 reserved (0)
//   16 u64 config_hash              24 u64 meta_bytes    32 u64 weight_bytes   40 u64 optim_bytes
//   48 meta (JSON, UTF-8) | weights (fp32, every parameter in model order) | optimizer state
//   last 8 bytes: u64 FNV-1a 64 of everything before it.
#include "checkpoint/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/common.h"
#include "model/gpt.h"
#include "optim/optim.h"

namespace clm {

namespace {

constexpr char kMagic[8] = {'C', 'L', 'M', 'C', 'K', 'P', 'T', '\0'};
constexpr size_t kHeader = 48;

template <typename T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
T get(const std::string& s, size_t off) {
  T v;
  std::memcpy(&v, s.data() + off, sizeof(T));
  return v;
}

int64_t numel_of(const Param& p) {
  int64_t n = 1;
  for (int64_t d : p.shape) n *= d;
  return n;
}

nlohmann::json param_table(GPT& model) {
  nlohmann::json t = nlohmann::json::array();
  for (const Param& p : model.params()) t.push_back({p.name, p.shape});
  return t;
}

// Hash in 8-byte words (FNV-1a over 64-bit lanes, then the tail bytes): ~8x faster than byte-wise on
// half-gigabyte checkpoints, and still catches any flipped or truncated byte.
uint64_t checksum(const char* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  size_t words = n / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, data + 8 * i, 8);
    h ^= w;
    h *= 0x100000001b3ULL;
    h ^= h >> 29;
  }
  return fnv1a64(data + 8 * words, n - 8 * words, h);
}

struct Parsed {
  uint64_t config_hash;
  nlohmann::json meta;
  size_t weights_off, weight_bytes, optim_off, optim_bytes;
};

// The fixed header, checked against the file's size: offsets and sizes of the three sections.
Parsed parse_header(const std::string& path, const char* h, size_t file_size) {
  if (file_size < kHeader + 8) fail("checkpoint {} is truncated ({} bytes)", path, file_size);
  if (std::memcmp(h, kMagic, 8) != 0) fail("{} is not a clocklm checkpoint (bad magic)", path);
  std::string hs(h, kHeader);
  uint32_t version = get<uint32_t>(hs, 8);
  if (version != kCheckpointVersion)
    fail("checkpoint {} has version {}, this clocklm reads version {}", path, version, kCheckpointVersion);
  Parsed p;
  p.config_hash = get<uint64_t>(hs, 16);
  uint64_t meta_bytes = get<uint64_t>(hs, 24), wb = get<uint64_t>(hs, 32), ob = get<uint64_t>(hs, 40);
  if (meta_bytes > file_size || wb > file_size || ob > file_size || kHeader + meta_bytes + wb + ob + 8 != file_size)
    fail("checkpoint {} is truncated or corrupt (size {} does not match its header)", path, file_size);
  p.weights_off = kHeader + meta_bytes;
  p.weight_bytes = wb;
  p.optim_off = p.weights_off + wb;
  p.optim_bytes = ob;
  return p;
}

nlohmann::json parse_meta(const std::string& path, const char* text, size_t n) {
  try {
    return nlohmann::json::parse(text, text + n);
  } catch (const nlohmann::json::exception&) {
    fail("checkpoint {} is corrupt (unreadable metadata)", path);
  }
}

// The whole file: header, checksum, metadata.
Parsed parse(const std::string& path, const std::string& blob) {
  Parsed p = parse_header(path, blob.data(), blob.size());
  uint64_t want = get<uint64_t>(blob, blob.size() - 8);
  if (checksum(blob.data(), blob.size() - 8) != want) fail("checkpoint {} is corrupt (checksum mismatch)", path);
  p.meta = parse_meta(path, blob.data() + kHeader, p.weights_off - kHeader);
  return p;
}

// Throws unless the file's parameter table and weight size are this model's.
void check_weights(const std::string& path, const Parsed& p, GPT& model) {
  if (p.meta.value("params", nlohmann::json()) != param_table(model))
    fail("checkpoint {} holds different parameters than this model", path);
  uint64_t weight_bytes = 0;
  for (const Param& q : model.params()) weight_bytes += uint64_t(numel_of(q)) * 4;
  if (weight_bytes != p.weight_bytes) fail("checkpoint {} has {} weight bytes, the model {}", path, p.weight_bytes, weight_bytes);
}

// Copies the weights; check_weights() has passed.
void copy_weights(const Parsed& p, const std::string& blob, GPT& model) {
  size_t off = p.weights_off;
  for (Param& q : model.params()) {
    size_t n = size_t(numel_of(q)) * 4;
    q.from_host(reinterpret_cast<const float*>(blob.data() + off));  // copied bytewise: any offset
    off += n;
  }
}

}  // namespace

void save_checkpoint(const std::string& path, const RunConfig& cfg, GPT& model, const Optimizer& opt,
                     const nlohmann::json& state) {
  nlohmann::json meta = state;
  meta["config"] = to_json(cfg);
  meta["config_hash"] = hex64(config_hash(cfg));
  meta["params"] = param_table(model);
  meta["clocklm_version"] = CLOCKLM_VERSION;
  std::string meta_text = meta.dump();
  std::ostringstream os;
  opt.save(os);
  std::string optim = os.str();
  uint64_t weight_bytes = 0;
  for (const Param& p : model.params()) weight_bytes += uint64_t(numel_of(p)) * 4;

  std::string blob;
  blob.reserve(kHeader + meta_text.size() + weight_bytes + optim.size() + 8);
  blob.append(kMagic, 8);
  put<uint32_t>(blob, kCheckpointVersion);
  put<uint32_t>(blob, 0);
  put<uint64_t>(blob, config_hash(cfg));
  put<uint64_t>(blob, meta_text.size());
  put<uint64_t>(blob, weight_bytes);
  put<uint64_t>(blob, optim.size());
  blob += meta_text;
  std::vector<float> host;
  for (const Param& p : model.params()) {
    host.resize(size_t(numel_of(p)));
    p.to_host(host.data());
    blob.append(reinterpret_cast<const char*>(host.data()), host.size() * 4);
  }
  blob += optim;
  put<uint64_t>(blob, checksum(blob.data(), blob.size()));
  atomic_write(path, blob);
}

nlohmann::json load_checkpoint(const std::string& path, const RunConfig& cfg, GPT& model, Optimizer& opt) {
  std::string blob = read_file(path);
  Parsed p = parse(path, blob);
  if (p.config_hash != config_hash(cfg))
    fail("checkpoint {} was written by a different config (hash {}, this run's config hashes to {}); "
         "model, optimizer, batch and seed must match to resume",
         path, hex64(p.config_hash), hex64(config_hash(cfg)));
  check_weights(path, p, model);
  // Optimizer first (it validates itself and changes nothing on failure), then the weights.
  std::istringstream is(blob.substr(p.optim_off, p.optim_bytes));
  try {
    opt.load(is);
  } catch (const Error& e) {
    fail("checkpoint {}: {}", path, e.what());
  }
  copy_weights(p, blob, model);
  return p.meta;
}

nlohmann::json load_checkpoint_weights(const std::string& path, GPT& model) {
  std::string blob = read_file(path);
  Parsed p = parse(path, blob);
  check_weights(path, p, model);
  copy_weights(p, blob, model);
  return p.meta;
}

nlohmann::json read_checkpoint_meta(const std::string& path) {
  // Header and metadata only: a checkpoint is mostly weights and optimizer state.
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open checkpoint {}", path);
  f.seekg(0, std::ios::end);
  size_t size = (size_t)f.tellg();
  f.seekg(0);
  char h[kHeader] = {};
  f.read(h, std::min(size, kHeader));
  Parsed p = parse_header(path, h, size);
  std::string meta(p.weights_off - kHeader, '\0');
  if (!f.read(meta.data(), (std::streamsize)meta.size())) fail("cannot read checkpoint {}", path);
  return parse_meta(path, meta.data(), meta.size());
}

std::string latest_checkpoint(const std::string& run_dir) {
  namespace fs = std::filesystem;
  fs::path latest = fs::path(run_dir) / "checkpoints" / "latest";
  if (!fs::exists(latest)) fail("{} has no checkpoint to resume from (no checkpoints/latest)", run_dir);
  std::string name = read_file(latest.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  fs::path p = fs::path(run_dir) / "checkpoints" / name;
  if (name.empty() || name.find('/') != std::string::npos || !fs::exists(p))
    fail("{}: checkpoints/latest names '{}', which does not exist", run_dir, name);
  return p.string();
}

}  // namespace clm

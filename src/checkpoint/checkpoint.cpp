// Checkpoint save and load against a model and optimizer; the file layout and its checks (header,
// checksum, metadata) are in checkpoint_format.cpp and docs/CHECKPOINT.md.
#include "checkpoint/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/common.h"
#include "model/gpt.h"
#include "optim/optim.h"

namespace clm {

namespace {

constexpr const char* kMagic = kCheckpointMagic;
constexpr size_t kHeader = kCheckpointHeaderBytes;

template <typename T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
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

// Throws unless the file's parameter table and weight size are this model's.
void check_weights(const std::string& path, const CheckpointView& p, GPT& model) {
  if (p.meta.value("params", nlohmann::json()) != param_table(model))
    fail("checkpoint {} holds different parameters than this model", path);
  uint64_t weight_bytes = 0;
  for (const Param& q : model.params()) weight_bytes += uint64_t(numel_of(q)) * 4;
  if (weight_bytes != p.weights.size())
    fail("checkpoint {} has {} weight bytes, the model {}", path, p.weights.size(), weight_bytes);
}

// Copies the weights; check_weights() has passed.
void copy_weights(const CheckpointView& p, GPT& model) {
  size_t off = 0;
  for (Param& q : model.params()) {
    size_t n = size_t(numel_of(q)) * 4;
    q.from_host(reinterpret_cast<const float*>(p.weights.data() + off));  // copied bytewise: any offset
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
  put<uint64_t>(blob, checkpoint_checksum(blob.data(), blob.size()));
  atomic_write(path, blob);
}

nlohmann::json load_checkpoint(const std::string& path, const RunConfig& cfg, GPT& model, Optimizer& opt) {
  std::string blob = read_file(path);
  CheckpointView p = parse_checkpoint(blob, path);
  if (p.config_hash != config_hash(cfg))
    fail("checkpoint {} was written by a different config (hash {}, this run's config hashes to {}); "
         "model, optimizer, batch and seed must match to resume",
         path, hex64(p.config_hash), hex64(config_hash(cfg)));
  check_weights(path, p, model);
  // Optimizer first (it validates itself and changes nothing on failure), then the weights.
  std::istringstream is{std::string(p.optim)};
  try {
    opt.load(is);
  } catch (const Error& e) {
    fail("checkpoint {}: {}", path, e.what());
  }
  copy_weights(p, model);
  return p.meta;
}

nlohmann::json load_checkpoint_weights(const std::string& path, GPT& model) {
  std::string blob = read_file(path);
  CheckpointView p = parse_checkpoint(blob, path);
  check_weights(path, p, model);
  copy_weights(p, model);
  return p.meta;
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

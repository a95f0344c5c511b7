// Checkpoint reading against hostile files: a header claiming absurd section sizes, and metadata
// whose config describes a model far larger than the weights the file holds, are refused with one
// line before anything is allocated from them; the in-memory parser agrees with the file readers.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "checkpoint/checkpoint.h"
#include "core/common.h"
#include "eval/model_load.h"
#include "model/gpt.h"
#include "optim/optim.h"

using namespace clm;
namespace fs = std::filesystem;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  return "(no error)";
}

// A real checkpoint of a tiny model, saved by save_checkpoint.
std::string tiny_checkpoint(const fs::path& dir) {
  RunConfig cfg =
      load_config("d4", {"n_layer=1", "d_model=64", "n_head=1", "n_kv_head=1", "head_dim=64",
                         "vocab_size=300", "seq_len=16", "micro_batch=1", "batch_tokens=16"});
  GPT model(cfg.model, 1, 16);
  Optimizer opt(model.params(), cfg.optim);
  std::string path = (dir / "step.ckpt").string();
  save_checkpoint(path, cfg, model, opt, {{"step", 0}});
  return path;
}

uint64_t u64_at(const std::string& b, size_t off) {
  uint64_t v;
  std::memcpy(&v, b.data() + off, 8);
  return v;
}

// The same payload under new metadata, with the header and checksum made consistent again.
std::string with_meta(const std::string& blob, const std::string& meta) {
  uint64_t old_meta = u64_at(blob, 24);
  std::string out = blob.substr(0, kCheckpointHeaderBytes);
  uint64_t n = meta.size();
  std::memcpy(out.data() + 24, &n, 8);
  out += meta;
  out += blob.substr(kCheckpointHeaderBytes + old_meta,
                     blob.size() - 8 - kCheckpointHeaderBytes - old_meta);
  uint64_t sum = checkpoint_checksum(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&sum), 8);
  return out;
}

}  // namespace

TEST(CheckpointRead, AbsurdHeaderSizesAreRefused) {
  fs::path dir = fs::temp_directory_path() / "clocklm_test_ckpt_sizes";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string blob = read_file(tiny_checkpoint(dir));
  CheckpointView v = parse_checkpoint(blob, "c");
  EXPECT_EQ(v.weights.size(), u64_at(blob, 32));
  EXPECT_NO_THROW(checkpoint_config(v.meta, v.weights.size(), "c"));
  // Each size field claiming far more than the file holds, with a valid checksum, so only the
  // size check stands between the header and an allocation of that size.
  for (size_t field : {24, 32, 40}) {
    for (uint64_t claim : {uint64_t(1) << 40, uint64_t(1) << 62, ~uint64_t(0)}) {
      std::string b = blob;
      std::memcpy(b.data() + field, &claim, 8);
      uint64_t sum = checkpoint_checksum(b.data(), b.size() - 8);
      std::memcpy(b.data() + b.size() - 8, &sum, 8);
      EXPECT_NE(error_of([&] { parse_checkpoint(b, "c"); }).find("does not match its header"),
                std::string::npos);
      atomic_write((dir / "bad.ckpt").string(), b);
      EXPECT_NE(error_of([&] {
                  read_checkpoint_meta((dir / "bad.ckpt").string());
                }).find("does not match its header"),
                std::string::npos);
    }
  }
  fs::remove_all(dir);
}

TEST(CheckpointRead, ConfigLargerThanTheWeightsIsRefusedBeforeTheModel) {
  fs::path dir = fs::temp_directory_path() / "clocklm_test_ckpt_config";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string blob = read_file(tiny_checkpoint(dir));
  nlohmann::json meta = parse_checkpoint(blob, "c").meta;
  // Terabytes of model in a file of a few hundred kilobytes.
  meta["config"]["model"]["d_model"] = 65536;
  meta["config"]["model"]["n_layer"] = 1024;
  meta["config"]["model"]["n_head"] = 1024;
  meta["config"]["model"]["n_kv_head"] = 1024;
  atomic_write((dir / "huge.ckpt").string(), with_meta(blob, meta.dump()));
  EXPECT_NE(error_of([&] {
              load_model_for_eval((dir / "huge.ckpt").string(), 1, 0, "cpu");
            }).find("weight bytes"),
            std::string::npos);
  // A config that does not validate, and metadata that is not an object.
  meta["config"]["model"]["n_head"] = 0;
  EXPECT_NE(error_of([&] { checkpoint_config(meta, 4, "c"); }).find("model.n_head"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { parse_checkpoint(with_meta(blob, "[1, 2]"), "c"); }).find("not a JSON object"),
      std::string::npos);
  // The untouched file still loads.
  atomic_write((dir / "ok.ckpt").string(),
               with_meta(blob, parse_checkpoint(blob, "c").meta.dump()));
  LoadedModel m = load_model_for_eval((dir / "ok.ckpt").string(), 1, 0, "cpu");
  EXPECT_EQ(m.cfg.model.d_model, 64);
  fs::remove_all(dir);
}

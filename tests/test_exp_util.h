// Shared helpers for the experiment-environment tests: a tiny prepared dataset (a few kB of
// twelve-word text, a 300-token tokenizer) and the config overrides of a model small enough to
// train a few steps in a second.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/common.h"
#include "data/prepare.h"
#include "profile/roofline.h"

namespace exp_test {

// Prepares DIR/data from generated text (train and val files under DIR/text); returns DIR/data.
inline std::string make_tiny_dataset(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir / "text");
  std::string train_text, val_text;
  const char* words[] = {"the", "cat", "sat", "on",  "a",    "mat",
                         "and", "dog", "ran", "far", "away", "home"};
  clm::Rng rng(5);
  for (int i = 0; i < 3000; ++i)
    (i < 2600 ? train_text : val_text) +=
        std::string(words[rng.next() % 12]) + (i % 13 == 12 ? ".\n" : " ");
  clm::atomic_write((dir / "text/train.txt").string(), train_text);
  clm::atomic_write((dir / "text/val.txt").string(), val_text);
  clm::PrepareOptions po;
  po.inputs = {(dir / "text/train.txt").string()};
  po.val_inputs = {(dir / "text/val.txt").string()};
  po.vocab_size = 300;
  po.out = (dir / "data").string();
  po.quiet = true;
  clm::prepare_dataset(po);
  return po.out;
}

// Points XDG_CACHE_HOME at `cache` and stores a made-up roofline there for this machine, so tools
// that need one (train --profile, describe_device) do not spend ~10 s measuring.
inline void use_fake_roofline_cache(const std::filesystem::path& cache) {
  ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);
  clm::Roofline roof;
  roof.cpu_model = "test";
  roof.threads = clm::default_threads();
  roof.fp32_flops = 100e9;
  roof.bf16_flops = 200e9;
  roof.copy_bytes_per_s = roof.triad_bytes_per_s = 20e9;
  std::string path = clm::roofline_cache_path(roof.threads);
  clm::make_dirs(std::filesystem::path(path).parent_path().string());
  clm::atomic_write(path, clm::to_json(roof).dump());
}

// A one-layer model with 32-token rows: a training step takes milliseconds.
inline std::vector<std::string> tiny_model_sets() {
  return {"model.n_layer=1",
          "model.d_model=64",
          "model.n_head=2",
          "model.n_kv_head=2",
          "model.head_dim=32",
          "model.seq_len=32",
          "train.batch_tokens=64",
          "train.micro_batch=2",
          "train.val_tokens=512",
          "train.periodic_val_tokens=256",
          "train.eval_every_seconds=20"};
}

// The same as `--set k=v` arguments for the command line.
inline std::string tiny_model_args() {
  std::string s;
  for (const auto& x : tiny_model_sets()) s += " --set " + x;
  return s;
}

}  // namespace exp_test

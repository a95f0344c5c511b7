// Shared helpers for the tests that train through the CLI: a tiny prepared dataset (built once per
// test process), per-process run folders, tiny-model flags, and readers for a run's metrics and
// checkpoints.
#pragma once
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/common.h"
#include "data/dataset.h"
#include "tok/train.h"

namespace run_test {

using namespace clm;
namespace fs = std::filesystem;

inline std::string last_line(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  auto pos = t.rfind('\n');
  return pos == std::string::npos ? t : t.substr(pos + 1);
}

// Pseudo-English from a small word list: enough structure for a tokenizer and a loss that falls.
inline std::string make_text(uint64_t seed, int n_docs, int words_per_doc) {
  static const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to",
                                "house", "with", "red", "door", "in", "garden", "of", "old", "tree", "by"};
  Rng rng(seed);
  std::string out;
  for (int d = 0; d < n_docs; ++d) {
    nlohmann::json doc;
    std::string text;
    for (int w = 0; w < words_per_doc; ++w) {
      if (w) text += (w % 9 == 8) ? ". " : " ";
      text += words[rng.next() % 20];
    }
    doc["text"] = text + ".";
    out += doc.dump() + "\n";
  }
  return out;
}

// A prepared dataset folder built with the public pieces (BPE trainer, shard writer, manifest), once
// per test process.
inline const std::string& tiny_dataset() {
  static std::string dir = [] {
    fs::path d = fs::temp_directory_path() / fmt::format("clocklm_train_data_{}", getpid());
    fs::remove_all(d);
    fs::create_directories(d);
    std::string train_jsonl = make_text(1, 300, 60), val_jsonl = make_text(2, 40, 60);
    auto texts = [](const std::string& jsonl) {
      std::vector<std::string> v;
      std::istringstream in(jsonl);
      std::string line;
      while (std::getline(in, line)) v.push_back(nlohmann::json::parse(line)["text"]);
      return v;
    };
    auto train_docs = texts(train_jsonl), val_docs = texts(val_jsonl);
    std::vector<std::string_view> views(train_docs.begin(), train_docs.end());
    BpeTrainOptions bo;
    bo.vocab_size = 320;
    Tokenizer tok = train_bpe(views, bo);
    tok.save((d / "tokenizer.json").string());
    nlohmann::json manifest = {
        {"tokenizer", {{"bos_id", tok.bos_id()}, {"vocab_size", tok.vocab_size()}, {"hash", tok.hash()}}}};
    for (auto [name, docs] : {std::pair{"train", &train_docs}, std::pair{"val", &val_docs}}) {
      std::vector<uint32_t> stream;
      for (auto& doc : *docs) {
        stream.push_back(tok.bos_id());
        auto ids = tok.encode(doc);
        stream.insert(stream.end(), ids.begin(), ids.end());
      }
      std::string file = fmt::format("{}_000000.bin", name);
      write_shard((d / file).string(), stream, tok.vocab_size());
      manifest["splits"][name] = {{"shards", {{{"file", file}, {"tokens", stream.size()}}}}};
    }
    atomic_write((d / "manifest.json").string(), manifest.dump(2));
    return d.string();
  }();
  return dir;
}

inline std::string temp_run(const std::string& name) {
  fs::path d = fs::temp_directory_path() / fmt::format("clocklm_train_{}_{}", name, getpid());
  fs::remove_all(d);
  return d.string();
}

// A tiny model and fast settings, as --set flags.
inline const std::string kTiny =
    " --config d4 --set n_layer=2 --set d_model=64 --set n_head=2 --set n_kv_head=2 --set head_dim=32"
    " --set seq_len=64 --set micro_batch=4 --set batch_tokens=512 --set val_tokens=2048"
    " --set periodic_val_tokens=1024 --set train.threads=2 --quiet";

inline std::vector<nlohmann::json> read_metrics(const std::string& run) {
  std::vector<nlohmann::json> rows;
  std::istringstream in(read_file(run + "/metrics.jsonl"));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// The weights + optimizer bytes of a checkpoint (everything between the metadata and the checksum).
inline std::string checkpoint_payload(const std::string& path) {
  std::string blob = read_file(path);
  uint64_t meta, wb, ob;
  std::memcpy(&meta, blob.data() + 24, 8);
  std::memcpy(&wb, blob.data() + 32, 8);
  std::memcpy(&ob, blob.data() + 40, 8);
  return blob.substr(48 + meta, wb + ob);
}

inline std::string latest_ckpt(const std::string& run) {
  std::string name = read_file(run + "/checkpoints/latest");
  while (!name.empty() && name.back() == '\n') name.pop_back();
  return run + "/checkpoints/" + name;
}

}  // namespace run_test

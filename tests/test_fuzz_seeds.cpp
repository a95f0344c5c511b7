// The fuzz targets' seed files (fuzz/corpus/<target>/) are real files that every reader must
// accept: when a format changes, this fails and the seeds get updated, instead of the fuzzers
// silently starting from inputs that are all rejected at the first check. A seed named refused-*
// is the opposite on purpose (a hostile shape the reader must refuse, so the fuzzer starts next to
// that check): it must be refused with a clm::Error. The refused-deep-* seeds nest past the JSON
// depth limit and are checked for that error by their own test.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "../fuzz/fuzz_util.h"
#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "core/common.h"
#include "core/json_parse.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "data/parquet.h"
#include "eval/core.h"
#include "lab/sweep.h"
#include "optim/optim_state.h"
#include "tok/bpe.h"
#include "tok/hf_json.h"
#include "tok/tiktoken.h"
#include "tok/tokenizer.h"

using namespace clm;
namespace fs = std::filesystem;

namespace {

bool named_refused(const std::string& path) { return fs::path(path).filename().string().rfind("refused-", 0) == 0; }

// The seed files of one target, read: all but the refused-deep-* ones (at least one must exist), or
// with `deep` only those.
std::vector<std::pair<std::string, std::string>> seeds(const std::string& target, bool deep = false) {
  std::vector<std::pair<std::string, std::string>> out;
  fs::path dir = fs::path(CLOCKLM_SOURCE_DIR) / "fuzz" / "corpus" / target;
  for (const auto& e : fs::directory_iterator(dir))
    if ((e.path().filename().string().rfind("refused-deep-", 0) == 0) == deep)
      out.emplace_back(e.path().string(), read_file(e.path().string()));
  if (!deep) EXPECT_FALSE(out.empty()) << dir;
  return out;
}

// A tokenizer seed loads and round-trips a sample, or, named refused-*, is refused with an Error.
template <class Load>
void expect_tokenizer_seed(const std::string& path, Load load) {
  if (named_refused(path)) {
    EXPECT_THROW(load(), Error) << path;
    return;
  }
  const std::string sample = "Seeds stay valid: 123 ünïcödé\n";
  Tokenizer t = load();
  EXPECT_EQ(t.decode(t.encode(sample)), sample) << path;
}

}  // namespace

TEST(FuzzSeeds, TokenizersLoadAndRoundTrip) {
  for (auto& [path, text] : seeds("fuzz_tokenizer_json"))
    expect_tokenizer_seed(path, [&] { return Tokenizer::from_json(text, path); });
  for (auto& [path, text] : seeds("fuzz_tokenizer_gpt2")) {
    auto files = fuzz::split_files(text, 2);
    expect_tokenizer_seed(path, [&] { return parse_gpt2(files[0], files[1], path); });
  }
  for (auto& [path, text] : seeds("fuzz_tokenizer_hf"))
    expect_tokenizer_seed(path, [&] { return parse_hf_tokenizer_text(text, path); });
  TokenizerOptions rank_opts;
  rank_opts.pattern = "clocklm";
  rank_opts.add_bos = "<|bos|>";
  for (auto& [path, text] : seeds("fuzz_tiktoken"))
    expect_tokenizer_seed(path, [&] { return parse_tiktoken_ranks(text, path, rank_opts); });
  for (auto& [path, bytes] : seeds("fuzz_tiktoken_pkl"))
    expect_tokenizer_seed(path, [&] { return parse_tiktoken_pickle(bytes, path); });
}

TEST(FuzzSeeds, DataFilesAreRead) {
  for (auto& [path, bytes] : seeds("fuzz_shard"))
    EXPECT_NO_THROW(parse_shard_header(bytes.data(), bytes.size(), path));
  for (auto& [path, text] : seeds("fuzz_manifest"))
    EXPECT_FALSE(parse_dataset_manifest(text, "/d").train_shards.empty());
  int64_t docs = 0;
  std::string doc;
  for (auto& [path, text] : seeds("fuzz_jsonl"))
    for (std::string_view line : fuzz::lines_of(text))
      docs += parse_jsonl_text(line, doc) == JsonLineResult::ok;
  EXPECT_GE(docs, 3);
}

TEST(FuzzSeeds, ConfigsValidate) {
  for (auto& [path, text] : seeds("fuzz_config")) {
    auto parts = fuzz::split_files(text, 3);
    RunConfig c =
        config_from_json_text(parts[0].empty() ? "{\"base\": \"d4\"}" : parts[0], path, "seed");
    std::vector<std::string> sets;
    for (std::string_view l : fuzz::lines_of(parts[1])) sets.emplace_back(l);
    apply_overrides(c, sets);
    EXPECT_NO_THROW(validate(c)) << path;
    for (std::string_view d : fuzz::lines_of(parts[2])) EXPECT_NO_THROW(parse_duration(d)) << path;
  }
}

TEST(FuzzSeeds, CheckpointsParse) {
  for (auto& [path, blob] : seeds("fuzz_checkpoint")) {
    CheckpointView v = parse_checkpoint(blob, path);
    EXPECT_GT(checkpoint_config(v.meta, v.weights.size(), path).model.vocab_size, 0);
    EXPECT_FALSE(parse_optim_state(v.optim).params.empty());
  }
}

TEST(FuzzSeeds, CoreFilesAndSweepsParse) {
  for (auto& [path, text] : seeds("fuzz_core_bundle")) {
    auto files = fuzz::split_files(text, 2);
    EXPECT_FALSE(parse_core_tasks(files[0], files[1], "core.yaml", "eval_meta_data.csv").empty())
        << path;
  }
  for (auto& [path, text] : seeds("fuzz_core_items"))
    EXPECT_GE(parse_core_items(text, path).size(), 3u);
  for (auto& [path, text] : seeds("fuzz_sweep"))
    EXPECT_FALSE(parse_sweep_spec_text(text, path).runs.empty());
}

// Seeds named refused-bomb-* are decompression bombs (tests/test_parquet_bomb_util.h): the reader
// must refuse them, with an Error; every other seed is a real file it reads.
TEST(FuzzSeeds, ParquetFilesAreRead) {
  for (auto& [path, bytes] : seeds("fuzz_parquet")) {
    auto read_all = [&, &path = path, &bytes = bytes] {
      auto f = ParquetFile::from_memory(bytes, path, "text");
      size_t docs = 0;
      for (size_t g = 0; g < f->row_groups(); ++g) docs += f->read_row_group(g).docs.size();
      return docs;
    };
    if (named_refused(path)) {
      EXPECT_THROW(read_all(), Error) << path;
      continue;
    }
    EXPECT_GT(read_all(), 0u) << path;
  }
}

TEST(FuzzSeeds, DeepSeedsAreRefusedForTheirDepth) {
  // Each reader of a corpus with refused-deep-* seeds, given the seed as its whole input.
  const std::vector<std::pair<std::string, std::function<void(const std::string&, const std::string&)>>> readers = {
      {"fuzz_config", [](auto& path, auto& text) { config_from_json_text(text, path, "seed"); }},
      {"fuzz_manifest", [](auto&, auto& text) { parse_dataset_manifest(text, "/d"); }},
      {"fuzz_tokenizer_json", [](auto& path, auto& text) { Tokenizer::from_json(text, path); }},
      {"fuzz_tokenizer_hf", [](auto& path, auto& text) { parse_hf_tokenizer_text(text, path); }},
      {"fuzz_sweep", [](auto& path, auto& text) { parse_sweep_spec_text(text, path); }},
      {"fuzz_checkpoint", [](auto& path, auto& blob) { parse_checkpoint(blob, path); }},
  };
  int refused = 0;
  for (auto& [target, read] : readers)
    for (auto& [path, text] : seeds(target, true)) {
      try {
        read(path, text);
        ADD_FAILURE() << path << " was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("nested deeper than"), std::string::npos) << path << ": " << e.what();
        ++refused;
      }
    }
  EXPECT_GE(refused, 6);
}

TEST(FuzzSeeds, JsonSeedsAreReadAsTheirNamesSay) {
  // fuzz_json's seeds sit just under and just over the depth limit: refused-* must be refused.
  for (auto& [path, text] : seeds("fuzz_json")) {
    nlohmann::json j;
    const bool refused = named_refused(path);
    EXPECT_EQ(try_parse_json(text, j, nullptr, {.allow_comments = true}), !refused) << path;
  }
}

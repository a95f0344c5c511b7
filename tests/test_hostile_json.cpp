// Hostile JSON and hostile options through the real binary: values nested far past the JSON depth
// limit in an MCP request, a config file and a checkpoint's metadata (with a valid checksum); eval
// on a dataset of another tokenizer; sampling options out of range; a checkpoint whose weights are
// NaN. Each command must end in a clean refusal (one line, exit 1, bounded memory and time) or, for
// the MCP server, an error response after which it keeps serving; no input file is changed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "core/common.h"
#include "core/json_parse.h"
#include "data/dataset.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "test_cli_util.h"
#include "test_exp_util.h"
#include "test_hostile_util.h"
#include "test_run_util.h"
#include "test_model_util.h"

using namespace clm;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Deep enough to overflow any recursive walk of the parsed value (the reported crash needed
// ~100k levels), and ~300 KB of text.
constexpr size_t kDeep = 150000;

std::string deep_array(size_t n) { return std::string(n, '[') + std::string(n, ']'); }

std::string bin() { return cli_test::clocklm_binary(); }

// A copy of a checkpoint file with its metadata object replaced by `edit(meta text)`: the size in
// the header and the checksum are rewritten, so the file is intact apart from what edit put there.
template <typename Edit>
void rewrite_checkpoint(const std::string& src, const std::string& dst, Edit edit) {
  std::string blob = read_file(src);
  uint64_t meta_bytes;
  std::memcpy(&meta_bytes, blob.data() + 24, 8);
  std::string meta = blob.substr(kCheckpointHeaderBytes, meta_bytes);
  std::string rest = blob.substr(kCheckpointHeaderBytes + meta_bytes, blob.size() - 8 - kCheckpointHeaderBytes - meta_bytes);
  std::string header = blob.substr(0, kCheckpointHeaderBytes);
  std::string new_meta = edit(meta);
  uint64_t n = new_meta.size();
  std::memcpy(header.data() + 24, &n, 8);
  std::string out = header + new_meta + rest;
  uint64_t sum = checkpoint_checksum(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&sum), 8);
  hostile::write_file(dst, out);
}

// A tiny untrained model's checkpoint in RUN/checkpoints, trained (as its metadata and run.json
// say) on run_test::tiny_dataset(); returns the checkpoint's path.
std::string make_checkpoint(const fs::path& run) {
  const std::string data = run_test::tiny_dataset();
  DatasetInfo info = read_dataset_info(data);
  RunConfig cfg;
  cfg.model = model_test::tiny_config(
      {.n_layer = 1, .n_head = 2, .n_kv_head = 2, .head_dim = 32, .vocab_size = int(info.vocab_size), .seq_len = 64});
  GPT model(cfg.model, 1, cfg.model.seq_len);
  model.init_weights(1);
  Optimizer opt(model.params(), cfg.optim);
  fs::create_directories(run / "checkpoints");
  std::string ckpt = (run / "checkpoints" / "step0.ckpt").string();
  save_checkpoint(ckpt, cfg, model, opt, {{"step", 0}, {"tokenizer_hash", info.tokenizer_hash}});
  atomic_write((run / "checkpoints" / "latest").string(), "step0.ckpt\n");
  atomic_write((run / "run.json").string(),
               json({{"dataset", {{"dir", data}, {"tokenizer_hash", info.tokenizer_hash}}}}).dump());
  return ckpt;
}

// The JSON-RPC responses among the lines `clocklm mcp` printed (stderr lines are not JSON objects).
std::vector<json> responses(const hostile::Outcome& o) {
  std::vector<json> out;
  for (const std::string& l : o.lines()) {
    json j;
    if (!l.empty() && l[0] == '{' && try_parse_json(l, j)) out.push_back(j);
  }
  return out;
}

std::string rpc(int id, const std::string& method, const json& params) {
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}}.dump();
}

class HostileJson : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("clocklm_test_hostile_json_" + std::to_string(::getpid()) + "_" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir / "in");
  }
  void TearDown() override { fs::remove_all(dir); }

  // Runs `clocklm mcp` with the given lines as its input; the server must exit 0 at end of input.
  hostile::Outcome mcp(const std::vector<std::string>& lines) {
    std::string input;
    for (const auto& l : lines) input += l + "\n";
    const std::string in = (dir / "mcp-in.jsonl").string();
    hostile::write_file(in, input);
    hostile::Outcome o = hostile::run_limited(bin() + " mcp --queue " + (dir / "q").string(), hostile::kMaxSeconds * 3, in);
    EXPECT_EQ(o.signal, 0) << o.out.substr(0, 2000);
    EXPECT_EQ(o.exit_code, 0) << o.out.substr(0, 2000);
    EXPECT_LE(o.peak_rss_mib, hostile::kMaxRssMiB);
    return o;
  }

  // A clean refusal whose one line holds `want`, with nothing under dir/in changed.
  void expect_refused(const std::string& cmd, const std::string& want) {
    const auto before = hostile::snapshot(dir / "in");
    hostile::Outcome o = hostile::run_limited(cmd);
    EXPECT_CLEAN_REFUSAL(o);
    EXPECT_NE(o.out.find("clocklm: error: "), std::string::npos) << cmd << "\n" << o.out;
    EXPECT_NE(o.out.find(want), std::string::npos) << cmd << "\n" << o.out;
    EXPECT_EQ(hostile::snapshot(dir / "in"), before) << cmd;
  }

  fs::path dir;
};

}  // namespace

TEST_F(HostileJson, McpAnswersADeepRequestWithAParseErrorAndKeepsServing) {
  const std::string deep =
      R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":)" + deep_array(kDeep) + "}}";
  hostile::Outcome o = mcp({deep, rpc(2, "ping", json::object())});
  EXPECT_LE(o.seconds, hostile::kMaxSeconds);
  std::vector<json> r = responses(o);
  ASSERT_EQ(r.size(), 2u) << o.out.substr(0, 2000);
  EXPECT_EQ(r[0]["error"]["code"], -32700);
  EXPECT_TRUE(r[0]["id"].is_null());
  EXPECT_NE(r[0]["error"]["message"].get<std::string>().find("nested deeper than 256 levels"), std::string::npos);
  EXPECT_EQ(r[1]["id"], 2);
  EXPECT_TRUE(r[1]["result"].is_object());
}

TEST_F(HostileJson, McpSkipsALineOverItsLimitAndKeepsServing) {
  const std::string huge = R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":")" +
                           std::string((size_t(16) << 20) + 1000, 'a') + "\"}}";
  hostile::Outcome o = mcp({huge, rpc(2, "ping", json::object())});
  EXPECT_LE(o.seconds, hostile::kMaxSeconds);
  std::vector<json> r = responses(o);
  ASSERT_EQ(r.size(), 2u) << o.out.substr(0, 2000);
  EXPECT_EQ(r[0]["error"]["code"], -32700);
  EXPECT_NE(r[0]["error"]["message"].get<std::string>().find("longer than 16 MiB"), std::string::npos);
  EXPECT_EQ(r[1]["id"], 2);
}

TEST_F(HostileJson, DeepConfigIsRefusedByModelTrainAndExpSubmit) {
  const std::string cfg = (dir / "in" / "deep.json").string();
  hostile::write_file(cfg, R"({"base": "d4", "model": {"x": )" + deep_array(kDeep) + "}}");
  const std::string data = exp_test::make_tiny_dataset(dir / "in");
  const std::string want = "deep.json: malformed JSON: nested deeper than 256 levels";
  expect_refused(bin() + " model --config " + cfg, want);
  expect_refused(bin() + " train --config " + cfg + " --data " + data + " --out " + (dir / "run").string(), want);
  expect_refused(bin() + " exp submit --queue " + (dir / "q").string() + " --config " + cfg + " --data " + data +
                     " --budget 60s --no-run",
                 want);
  EXPECT_FALSE(fs::exists(dir / "run"));
}

TEST_F(HostileJson, CheckpointWithDeepMetadataIsRefusedBySampleAndExport) {
  const std::string good = make_checkpoint(dir / "run");
  const std::string bad = (dir / "in" / "deep.ckpt").string();
  rewrite_checkpoint(good, bad, [](std::string meta) {
    meta.pop_back();  // the closing brace of the metadata object
    return meta + ",\"deep\":" + deep_array(kDeep) + "}";
  });
  const std::string want = "unreadable metadata: nested deeper than 256 levels";
  expect_refused(bin() + " sample --checkpoint " + bad + " --prompt the --tokens 2", want);
  expect_refused(bin() + " export --checkpoint " + bad + " --format safetensors --out " + (dir / "out").string(), want);
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST_F(HostileJson, EvalBpbRefusesAnotherTokenizersDatasetUnlessAllowed) {
  const std::string ckpt = make_checkpoint(dir / "run");
  // The same generated text as the run's dataset, another tokenizer (300 ids against 320).
  const std::string other = exp_test::make_tiny_dataset(dir / "in");
  ASSERT_NE(read_dataset_info(other).tokenizer_hash, read_dataset_info(run_test::tiny_dataset()).tokenizer_hash);
  const std::string eval = bin() + " eval bpb --checkpoint " + ckpt + " --data " + other + " --val-tokens 128 --batch 2";
  expect_refused(eval, "is not the one " + ckpt + " was trained with");
  expect_refused(eval, "pass --allow-tokenizer-mismatch");
  hostile::Outcome ok = hostile::run_limited(eval + " --allow-tokenizer-mismatch");
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("val bpb"), std::string::npos) << ok.out;
  EXPECT_LE(ok.peak_rss_mib, hostile::kMaxRssMiB);

  // The MCP tool refuses the same way, and its argument of the same meaning lets it through.
  json args = {{"run", ckpt}, {"metric", "bpb"}, {"data", other}, {"val_tokens", 128}, {"batch", 2}};
  json allowed = args;
  allowed["allow_tokenizer_mismatch"] = true;
  hostile::Outcome o = mcp({rpc(1, "tools/call", {{"name", "evaluate_checkpoint"}, {"arguments", args}}),
                            rpc(2, "tools/call", {{"name", "evaluate_checkpoint"}, {"arguments", allowed}})});
  std::vector<json> r = responses(o);
  ASSERT_EQ(r.size(), 2u) << o.out;
  EXPECT_TRUE(r[0]["result"]["isError"].get<bool>()) << r[0].dump();
  const std::string msg = r[0]["result"]["content"][0]["text"].get<std::string>();
  EXPECT_NE(msg.find("was trained with"), std::string::npos) << msg;
  EXPECT_NE(msg.find("set allow_tokenizer_mismatch"), std::string::npos) << msg;
  EXPECT_FALSE(r[1]["result"]["isError"].get<bool>()) << r[1].dump();
  EXPECT_GT(r[1]["result"]["structuredContent"]["result"]["bpb"].get<double>(), 0);
}

TEST_F(HostileJson, SampleRefusesOptionsOutOfRange) {
  const std::string ckpt = make_checkpoint(dir / "run");
  const std::string sample = bin() + " sample --checkpoint " + ckpt + " --prompt the --tokens 2";
  expect_refused(sample + " --top-k -3", "top-k must be >= 0");
  expect_refused(sample + " --temperature inf", "temperature must be a finite number >= 0 (got inf)");
  expect_refused(sample + " --temperature -1", "temperature must be a finite number >= 0 (got -1)");
}

TEST_F(HostileJson, SampleAndEvalRefuseACheckpointWithNaNWeights) {
  const std::string good = make_checkpoint(dir / "run");
  // The metadata kept, every weight and optimizer byte NaN, the checksum valid.
  std::string blob = read_file(good);
  uint64_t meta_bytes, weight_bytes;
  std::memcpy(&meta_bytes, blob.data() + 24, 8);
  std::memcpy(&weight_bytes, blob.data() + 32, 8);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t off = kCheckpointHeaderBytes + meta_bytes; off + 4 <= kCheckpointHeaderBytes + meta_bytes + weight_bytes;
       off += 4)
    std::memcpy(blob.data() + off, &nan, 4);
  uint64_t sum = checkpoint_checksum(blob.data(), blob.size() - 8);
  std::memcpy(blob.data() + blob.size() - 8, &sum, 8);
  const std::string bad = (dir / "run" / "checkpoints" / "nan.ckpt").string();
  hostile::write_file(bad, blob);
  const std::string want = "the model's output is not finite";
  expect_refused(bin() + " sample --checkpoint " + bad + " --prompt the --tokens 2", "sample: " + want);
  expect_refused(bin() + " eval bpb --checkpoint " + bad + " --val-tokens 128 --batch 2", "bpb: " + want);
}

TEST_F(HostileJson, McpShowConfigRefusesAVocabularyTheCliRefuses) {
  const std::string big = "4294967297";  // 2^32 + 1: wrapped modulo 2^32 it would read as 1
  expect_refused(bin() + " model --config d4 --set model.vocab_size=" + big, "model.vocab_size");
  hostile::Outcome o = mcp({rpc(1, "tools/call", {{"name", "show_config"},
                                                   {"arguments", {{"config", "d4"}, {"vocab_size", 4294967297LL}}}}),
                            rpc(2, "tools/call", {{"name", "show_config"},
                                                   {"arguments", {{"config", "d4"}, {"vocab_size", 50000}}}})});
  std::vector<json> r = responses(o);
  ASSERT_EQ(r.size(), 2u) << o.out;
  EXPECT_TRUE(r[0]["result"]["isError"].get<bool>()) << r[0].dump();
  EXPECT_NE(r[0]["result"]["content"][0]["text"].get<std::string>().find("model.vocab_size"), std::string::npos)
      << r[0].dump();
  EXPECT_FALSE(r[1]["result"]["isError"].get<bool>()) << r[1].dump();
  EXPECT_GT(r[1]["result"]["structuredContent"]["params"]["embed"].get<double>(), 0) << r[1].dump();
}

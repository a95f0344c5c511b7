// Shared helpers of the ONNX export tests: finding the independent checkers (python3-onnx's
// checker, ONNX Runtime through onnxruntime-node), running them on a model file, and reading the
// logits ONNX Runtime computed (tests/clients/onnx_run.mjs).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/common.h"
#include "test_cli_util.h"

namespace onnx_test {

inline std::string clients_dir() { return std::string(CLOCKLM_SOURCE_DIR) + "/tests/clients"; }

// A python3 that imports onnx (the first of python3 and /usr/bin/python3), or "".
inline std::string python_with_onnx() {
  for (const char* py : {"python3", "/usr/bin/python3"})
    if (cli_test::run_cmd(std::string(py) + " -c 'import onnx' >/dev/null").status == 0) return py;
  return "";
}

// Why ONNX Runtime cannot run here ("" when node loads onnxruntime-node from tests/clients).
inline std::string onnxruntime_missing() {
  if (cli_test::run_cmd("command -v node >/dev/null").status != 0) return "node is not installed";
  auto r = cli_test::run_cmd("cd " + clients_dir() +
                             " && node --input-type=module -e \"import ort from 'onnxruntime-node'; "
                             "console.log(typeof ort.InferenceSession)\"");
  if (r.status != 0 || r.out.find("function") == std::string::npos)
    return "onnxruntime-node does not load from tests/clients/node_modules (npm install --ignore-scripts there): " +
           r.out.substr(0, 200);
  return "";
}

// python3-onnx's full check (structure, operator schemas, strict shape inference) on `path`.
inline cli_test::CmdResult onnx_check(const std::string& python, const std::string& path) {
  return cli_test::run_cmd(python + " -c \"import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), "
                                    "full_check=True); print('onnx checker: ok')\" " + path);
}

struct OrtResult {
  std::vector<std::vector<float>> logits;  // per batch, B x T x V
  std::vector<std::vector<int64_t>> dims;
  std::vector<int32_t> greedy;
  std::vector<int32_t> incremental;        // the greedy continuation through the generation variant
  std::vector<float> incremental_logits;   // N x V: the logits each of those ids was taken from
};

// The generation variant (model_with_past.onnx) and the cache shape it takes, for run_onnxruntime.
struct WithPast {
  std::string model;
  int kv_heads = 0, head_dim = 0;
};

// Runs onnx_run.mjs on `model`: the logits of each batch (equal-length rows), and a greedy
// continuation of `prompt` by `tokens` ids when tokens > 0. Files go next to the model.
// With `past`, the same continuation also through the generation variant.
inline OrtResult run_onnxruntime(const std::string& model, const std::vector<std::vector<std::vector<int32_t>>>& batches,
                                 const std::vector<int32_t>& prompt = {}, int tokens = 0, const WithPast& past = {}) {
  nlohmann::json job = {{"batches", batches}};
  if (tokens > 0) job["greedy"] = {{"prompt", prompt}, {"tokens", tokens}};
  if (tokens > 0 && !past.model.empty())
    job["incremental"] = {{"model", past.model}, {"prompt", prompt}, {"tokens", tokens},
                          {"kv_heads", past.kv_heads}, {"head_dim", past.head_dim}};
  const std::string in = model + ".in.json", out = model + ".out.json";
  clm::atomic_write(in, job.dump());
  auto r = cli_test::run_cmd("node " + clients_dir() + "/onnx_run.mjs " + model + " " + in + " " + out);
  if (r.status != 0) throw clm::Error("onnx_run.mjs failed: " + r.out);
  auto j = nlohmann::json::parse(clm::read_file(out));
  OrtResult res;
  for (const auto& b : j["logits"]) res.logits.push_back(b.get<std::vector<float>>());
  for (const auto& d : j["dims"]) res.dims.push_back(d.get<std::vector<int64_t>>());
  if (j.contains("greedy")) res.greedy = j["greedy"].get<std::vector<int32_t>>();
  if (j.contains("incremental")) {
    res.incremental = j["incremental"].get<std::vector<int32_t>>();
    res.incremental_logits = j["incremental_logits"].get<std::vector<float>>();
  }
  return res;
}

}  // namespace onnx_test

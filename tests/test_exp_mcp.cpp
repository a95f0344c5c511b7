// The MCP server of `clocklm mcp`: JSON-RPC framing and errors (malformed JSON, invalid requests,
// unknown methods and tools, arguments that break a tool's schema), tool failures reported with the
// CLI's one-line message, the server serving on after each of them, the tools' outputs against
// their output schemas, resources, and the stdio process itself. The end-to-end research loop
// through the official MCP SDK client is tests/mcp/e2e.mjs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "agent/json_schema.h"
#include "agent/mcp_server.h"
#include "agent/tools.h"
#include "core/common.h"
#include "test_cli_util.h"
#include "test_exp_util.h"

using namespace clm;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

class ExpMcp : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("clocklm_test_exp_mcp_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    ctx = std::make_unique<AgentContext>(
        AgentContext{ExperimentQueue((dir / "q").string()), CLOCKLM_BINARY});
    server = std::make_unique<McpServer>(make_clocklm_server(*ctx));
  }
  void TearDown() override { fs::remove_all(dir); }

  json rpc(const std::string& line) {
    std::string r = server->handle_line(line);
    EXPECT_FALSE(r.empty()) << line;
    return r.empty() ? json() : json::parse(r);
  }
  json request(const std::string& method, const json& params, int id = 1) {
    return rpc(json{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}}.dump());
  }
  json call(const std::string& tool, const json& args) {
    return request("tools/call", {{"name", tool}, {"arguments", args}});
  }
  // The server still answers after whatever came before.
  void expect_alive() {
    json r = request("ping", json::object(), 99);
    EXPECT_EQ(r["id"], 99);
    EXPECT_TRUE(r["result"].is_object()) << r.dump();
  }
  // A successful tool result whose structured content satisfies the tool's output schema.
  json ok(const std::string& tool, const json& r) {
    EXPECT_TRUE(r.contains("result")) << r.dump();
    if (!r.contains("result")) return json();
    EXPECT_FALSE(r["result"]["isError"].get<bool>()) << r.dump();
    const json& sc = r["result"]["structuredContent"];
    for (const auto& t : server->tools()) {
      if (t.name != tool) continue;
      EXPECT_EQ(schema_violation(t.output_schema, sc, tool), "");
    }
    EXPECT_EQ(json::parse(r["result"]["content"][0]["text"].get<std::string>()), sc);
    return sc;
  }

  fs::path dir;
  std::unique_ptr<AgentContext> ctx;
  std::unique_ptr<McpServer> server;
};

}  // namespace

TEST_F(ExpMcp, InitializeNegotiatesTheProtocolVersion) {
  json r = request("initialize", {{"protocolVersion", "2025-06-18"},
                                  {"capabilities", json::object()},
                                  {"clientInfo", {{"name", "t"}, {"version", "1"}}}});
  EXPECT_EQ(r["jsonrpc"], "2.0");
  EXPECT_EQ(r["result"]["protocolVersion"], "2025-06-18");
  EXPECT_EQ(r["result"]["serverInfo"]["name"], "clocklm");
  EXPECT_TRUE(r["result"]["capabilities"].contains("tools"));
  EXPECT_TRUE(r["result"]["capabilities"].contains("resources"));
  // An unknown revision is answered with the newest this server speaks.
  r = request("initialize", {{"protocolVersion", "1999-01-01"}});
  EXPECT_EQ(r["result"]["protocolVersion"], McpServer::protocol_versions().front());
  EXPECT_EQ(server->handle_line(R"({"jsonrpc":"2.0","method":"notifications/initialized"})"), "");
}

TEST_F(ExpMcp, ProtocolErrorsAreJsonRpcErrorsAndTheServerKeepsServing) {
  struct Case {
    std::string line;
    int code;
    std::string message;
  };
  const Case cases[] = {
      {"{not json", kParseError, "parse error"},
      {"[1, 2]", kInvalidRequest, "batches are not supported"},
      {"42", kInvalidRequest, "must be a JSON object"},
      {R"({"jsonrpc":"1.0","id":1,"method":"ping"})", kInvalidRequest, "'jsonrpc' must be \"2.0\""},
      {R"({"jsonrpc":"2.0","id":{"a":1},"method":"ping"})", kInvalidRequest,
       "'id' must be a string or an integer"},
      {R"({"jsonrpc":"2.0","id":1})", kInvalidRequest, "'method' is missing"},
      {R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]})", kInvalidParams,
       "'params' must be an object"},
      {R"({"jsonrpc":"2.0","id":1,"method":"no/such"})", kMethodNotFound,
       "method not found: no/such"},
      {R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nope"}})", kInvalidParams,
       "unknown tool 'nope'"},
      {R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"submit_experiment","arguments":{"config":"d4"}}})",
       kInvalidParams,
       "invalid arguments for tool submit_experiment: arguments: missing required property "
       "'budget'"},
      {R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"show_config","arguments":{"config":"d4","set":"x=1"}}})",
       kInvalidParams, "arguments.set: expected array"},
      {R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"show_config","arguments":{"config":"d4","bogus":1}}})",
       kInvalidParams, "unknown property 'bogus'"},
      {R"({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"clocklm://experiments/exp-0001/../../etc/passwd"}})",
       kResourceNotFound, "resource not found"},
      // Nesting far past the parser's depth limit: refused while parsing, never walked.
      {R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":)" + std::string(200000, '[') +
           std::string(200000, ']') + "}}",
       kParseError, "nested deeper than 256 levels"},
  };
  for (const auto& c : cases) {
    json r = rpc(c.line);
    ASSERT_TRUE(r.contains("error")) << c.line.substr(0, 200) << " -> " << r.dump();
    EXPECT_EQ(r["error"]["code"], c.code) << c.line.substr(0, 200);
    if (c.code == kParseError) EXPECT_TRUE(r["id"].is_null()) << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find(c.message), std::string::npos)
        << r.dump();
    expect_alive();
  }
}

TEST_F(ExpMcp, ToolFailuresCarryTheCliErrorLine) {
  std::string data = exp_test::make_tiny_dataset(dir);
  json r = call("submit_experiment", {{"config", "d4"},
                                      {"set", {"model.no_such_key=1"}},
                                      {"budget", "1m"},
                                      {"data", data},
                                      {"hypothesis", "h"}});
  ASSERT_TRUE(r["result"]["isError"].get<bool>()) << r.dump();
  std::string msg = r["result"]["content"][0]["text"].get<std::string>();
  std::string cli;
  cli_test::run_clocklm("exp submit --no-run --queue " + (dir / "q").string() +
                            " --config d4 --set model.no_such_key=1 --budget 1m --data " + data,
                        &cli);
  EXPECT_EQ(cli, "clocklm: error: " + msg + "\n");
  expect_alive();
  r = call("experiment_status", {{"id", "exp-0007"}});
  EXPECT_TRUE(r["result"]["isError"].get<bool>());
  EXPECT_NE(r["result"]["content"][0]["text"].get<std::string>().find("no experiment 'exp-0007'"),
            std::string::npos);
  expect_alive();
}

TEST_F(ExpMcp, InformationToolsMatchTheirSchemas) {
  exp_test::use_fake_roofline_cache(dir / "cache");
  json tools = request("tools/list", json::object())["result"]["tools"];
  std::set<std::string> names;
  for (const auto& t : tools) {
    names.insert(t["name"].get<std::string>());
    EXPECT_EQ(t["inputSchema"]["type"], "object") << t.dump();
    EXPECT_EQ(t["outputSchema"]["type"], "object") << t.dump();
    EXPECT_FALSE(t["description"].get<std::string>().empty());
  }
  for (const char* n :
       {"describe_device", "list_configs", "show_config", "prepare_data", "submit_experiment",
        "list_experiments", "experiment_status", "cancel_experiment", "experiment_results",
        "compare_runs", "leaderboard", "evaluate_checkpoint", "sample_text", "journal"})
    EXPECT_TRUE(names.count(n)) << n;

  json dev = ok("describe_device", call("describe_device", json::object()));
  EXPECT_EQ(dev["roofline"]["bf16_flops"], 200e9);
  json cfgs = ok("list_configs", call("list_configs", {{"preset", "d4"}}));
  EXPECT_GT(cfgs["presets"].size(), 3u);
  bool has_key = false;
  for (const auto& k : cfgs["keys"]) has_key = has_key || k["key"] == "optim.matrix.lr";
  EXPECT_TRUE(has_key);
  json sc = ok(
      "show_config",
      call("show_config", {{"config", "d4"}, {"set", {"model.n_layer=2"}}, {"vocab_size", 300}}));
  EXPECT_EQ(sc["config"]["model"]["n_layer"], 2);
  EXPECT_GT(sc["params"]["total"].get<double>(), 0);
  EXPECT_GT(sc["flops_per_step"].get<double>(), sc["flops_per_token"].get<double>());
  json st = ok("experiment_status", call("experiment_status", json::object()));
  EXPECT_TRUE(st["experiment"].is_null());
  EXPECT_TRUE(ok("leaderboard", call("leaderboard", json::object()))["runs"].empty());
}

TEST_F(ExpMcp, ResourcesServeDocsAndExperimentFiles) {
  json list = request("resources/list", json::object())["result"]["resources"];
  bool agents = false;
  for (const auto& r : list) agents = agents || r["uri"] == "clocklm://docs/AGENTS.md";
  EXPECT_TRUE(agents) << list.dump();
  json r = request("resources/read", {{"uri", "clocklm://docs/AGENTS.md"}});
  EXPECT_EQ(r["result"]["contents"][0]["mimeType"], "text/markdown");
  EXPECT_NE(r["result"]["contents"][0]["text"].get<std::string>().find("clocklm mcp"),
            std::string::npos);
  EXPECT_EQ(
      request("resources/templates/list", json::object())["result"]["resourceTemplates"].size(),
      2u);
  r = request("resources/read", {{"uri", "clocklm://docs/../README.md"}});
  EXPECT_EQ(r["error"]["code"], kResourceNotFound);
}

TEST_F(ExpMcp, StdioServerAnswersLineByLineAndKeepsStdoutClean) {
  // Every output line is a JSON-RPC response with the id of its request, in order, and nothing
  // else reaches stdout (stderr is discarded here).
  std::string input =
      R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
garbage
{"jsonrpc":"2.0","id":"two","method":"tools/call","params":{"name":"list_configs","arguments":{}}}

{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"nope"}}
{"jsonrpc":"2.0","id":4,"method":"ping"}
)";
  atomic_write((dir / "in.jsonl").string(), input);
  auto r = cli_test::run_cmd(std::string(CLOCKLM_BINARY) + " mcp --queue " + (dir / "q").string() +
                             " < " + (dir / "in.jsonl").string() + " 2>/dev/null");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<json> lines;
  size_t p = 0, nl;
  while ((nl = r.out.find('\n', p)) != std::string::npos) {
    lines.push_back(json::parse(r.out.substr(p, nl - p)));
    p = nl + 1;
  }
  ASSERT_EQ(lines.size(), 5u) << r.out;
  EXPECT_EQ(lines[0]["id"], 1);
  EXPECT_EQ(lines[1]["error"]["code"], kParseError);
  EXPECT_EQ(lines[2]["id"], "two");
  EXPECT_FALSE(lines[2]["result"]["isError"].get<bool>());
  EXPECT_EQ(lines[3]["error"]["code"], kInvalidParams);
  EXPECT_EQ(lines[4]["id"], 4);
}

TEST(ExpMcpSchema, ChecksTheSubsetToolsUse) {
  json s = json::parse(R"({"type":"object","additionalProperties":false,"required":["a"],
    "properties":{"a":{"type":"string","minLength":1},"n":{"type":"integer","minimum":0,"maximum":9},
                  "k":{"type":"string","enum":["x","y"]},"l":{"type":"array","minItems":2,"items":{"type":"string"}},
                  "f":{"type":["number","null"]}}})");
  EXPECT_EQ(schema_violation(s, json::parse(R"({"a":"v","n":3,"k":"x","l":["p","q"],"f":null})")),
            "");
  EXPECT_EQ(schema_violation(s, json::parse(R"({"a":"v","f":1.5,"n":2.0})")), "");
  EXPECT_EQ(schema_violation(s, json::parse(R"({})")), "arguments: missing required property 'a'");
  EXPECT_EQ(schema_violation(s, json::parse(R"({"a":""})")),
            "arguments.a: must be at least 1 characters long");
  EXPECT_EQ(schema_violation(s, json::parse(R"({"a":"v","n":1.5})")),
            "arguments.n: expected integer, got 1.5");
  EXPECT_EQ(schema_violation(s, json::parse(R"({"a":"v","n":10})")),
            "arguments.n: must be at most 9 (got 10)");
  EXPECT_EQ(schema_violation(s, json::parse(R"({"a":"v","k":"z"})")),
            R"(arguments.k: must be one of "x", "y" (got "z"))");
  EXPECT_EQ(schema_violation(s, json::parse(R"({"a":"v","l":["p"]})")),
            "arguments.l: needs at least 2 items (got 1)");
  EXPECT_EQ(schema_violation(s, json::parse(R"({"a":"v","l":["p",3]})")),
            "arguments.l[1]: expected string, got 3");
  EXPECT_EQ(schema_violation(s, json::parse(R"({"a":"v","f":"s"})")),
            R"(arguments.f: expected number or null, got "s")");
  EXPECT_NE(schema_violation(s, json::parse(R"({"a":"v","z":1})")).find("unknown property 'z'"),
            std::string::npos);
  EXPECT_EQ(schema_violation(s, json::parse("[]")), "arguments: expected object, got []");
}

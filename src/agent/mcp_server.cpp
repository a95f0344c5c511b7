// The MCP protocol layer (see mcp_server.h). Framing is newline-delimited JSON on stdio; the
// server handles one message at a time, so a slow tool delays the next answer but never reorders
// them. Protocol problems (unparsable JSON, a malformed request, an unknown method or tool,
// arguments that do not fit the tool's schema) are JSON-RPC errors; a tool that fails reports it in
// its result (isError), as the MCP specification asks, and the server keeps serving either way.
#include "agent/mcp_server.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "agent/json_schema.h"
#include "core/common.h"
#include "core/json_parse.h"

namespace clm {

namespace {

// Raised inside dispatch to answer with a JSON-RPC error.
struct RpcError : std::runtime_error {
  int code;
  RpcError(int c, const std::string& m) : std::runtime_error(m), code(c) {}
};

std::string error_line(const nlohmann::json& id, int code, const std::string& message) {
  return nlohmann::json{
      {"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}}
      .dump();
}

std::string too_long_line() {
  return error_line(nullptr, kParseError,
                    fmt::format("parse error: a message longer than {} MiB", kMaxMcpLineBytes >> 20));
}

}  // namespace

const std::vector<std::string>& McpServer::protocol_versions() {
  static const std::vector<std::string> v = {"2025-11-25", "2025-06-18", "2025-03-26",
                                             "2024-11-05"};
  return v;
}

McpServer::McpServer(std::string name, std::string version, std::string instructions)
    : name_(std::move(name)),
      version_(std::move(version)),
      instructions_(std::move(instructions)) {}

void McpServer::add_tool(McpTool tool) { tools_.push_back(std::move(tool)); }

nlohmann::json McpServer::call_tool(const nlohmann::json& params) {
  if (!params.contains("name") || !params["name"].is_string())
    throw RpcError(kInvalidParams, "tools/call: 'name' must be a string");
  const std::string name = params["name"].get<std::string>();
  const McpTool* tool = nullptr;
  for (const auto& t : tools_)
    if (t.name == name) tool = &t;
  if (!tool) throw RpcError(kInvalidParams, fmt::format("unknown tool '{}'", name));
  nlohmann::json args = params.value("arguments", nlohmann::json::object());
  if (args.is_null()) args = nlohmann::json::object();
  if (std::string v = schema_violation(tool->input_schema, args); !v.empty())
    throw RpcError(kInvalidParams, fmt::format("invalid arguments for tool {}: {}", name, v));
  nlohmann::json result;
  try {
    result = tool->handler(args);
  } catch (const std::exception& e) {
    return {{"content", {{{"type", "text"}, {"text", e.what()}}}}, {"isError", true}};
  }
  return {{"content", {{{"type", "text"}, {"text", result.dump(2)}}}},
          {"structuredContent", result},
          {"isError", false}};
}

nlohmann::json McpServer::dispatch(const std::string& method, const nlohmann::json& params) {
  if (method == "initialize") {
    std::string asked = params.value("protocolVersion", "");
    const auto& known = protocol_versions();
    std::string v =
        std::find(known.begin(), known.end(), asked) != known.end() ? asked : known.front();
    return {{"protocolVersion", v},
            {"capabilities",
             {{"tools", {{"listChanged", false}}},
              {"resources", {{"subscribe", false}, {"listChanged", false}}}}},
            {"serverInfo",
             {{"name", name_}, {"title", "clocklm experiment environment"}, {"version", version_}}},
            {"instructions", instructions_}};
  }
  if (method == "ping") return nlohmann::json::object();
  if (method == "tools/list") {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& t : tools_)
      list.push_back({{"name", t.name},
                      {"title", t.title},
                      {"description", t.description},
                      {"inputSchema", t.input_schema},
                      {"outputSchema", t.output_schema},
                      {"annotations", {{"readOnlyHint", t.read_only}, {"openWorldHint", false}}}});
    return {{"tools", list}};
  }
  if (method == "tools/call") return call_tool(params);
  if (method == "resources/list") {
    nlohmann::json list = nlohmann::json::array();
    if (resources_.list)
      for (const auto& r : resources_.list())
        list.push_back({{"uri", r.uri},
                        {"name", r.name},
                        {"description", r.description},
                        {"mimeType", r.mime_type}});
    return {{"resources", list}};
  }
  if (method == "resources/templates/list") return {{"resourceTemplates", resources_.templates}};
  if (method == "resources/read") {
    if (!params.contains("uri") || !params["uri"].is_string())
      throw RpcError(kInvalidParams, "resources/read: 'uri' must be a string");
    std::string uri = params["uri"].get<std::string>(), mime = "text/plain";
    if (!resources_.read) throw RpcError(kResourceNotFound, "resource not found: " + uri);
    std::string text;
    try {
      text = resources_.read(uri, mime);
    } catch (const Error& e) {
      throw RpcError(kResourceNotFound, e.what());
    }
    return {{"contents", {{{"uri", uri}, {"mimeType", mime}, {"text", text}}}}};
  }
  throw RpcError(kMethodNotFound, fmt::format("method not found: {}", method));
}

std::string McpServer::handle_line(const std::string& line) {
  nlohmann::json msg;
  if (std::string why; !try_parse_json(line, msg, &why))
    return error_line(nullptr, kParseError, "parse error: the message is not valid JSON: " + why);
  if (msg.is_array())
    return error_line(nullptr, kInvalidRequest, "invalid request: batches are not supported");
  if (!msg.is_object())
    return error_line(nullptr, kInvalidRequest, "invalid request: a message must be a JSON object");
  const bool is_request = msg.contains("id");
  nlohmann::json id = is_request ? msg["id"] : nlohmann::json();
  if (is_request && !id.is_string() && !id.is_number_integer())
    return error_line(nullptr, kInvalidRequest,
                      "invalid request: 'id' must be a string or an integer");
  if (msg.value("jsonrpc", "") != "2.0")
    return error_line(id, kInvalidRequest, "invalid request: 'jsonrpc' must be \"2.0\"");
  if (!msg.contains("method")) {
    if (msg.contains("result") || msg.contains("error"))
      return "";  // a response: this server sends no requests
    return error_line(id, kInvalidRequest, "invalid request: 'method' is missing");
  }
  if (!msg["method"].is_string())
    return error_line(id, kInvalidRequest, "invalid request: 'method' must be a string");
  const std::string method = msg["method"].get<std::string>();
  if (!is_request) return "";  // notifications (initialized, cancelled, ...) need no answer
  nlohmann::json params = msg.contains("params") ? msg["params"] : nlohmann::json::object();
  if (!params.is_object())
    return error_line(id, kInvalidParams, "invalid params: 'params' must be an object");
  try {
    return nlohmann::json{{"jsonrpc", "2.0"}, {"id", id}, {"result", dispatch(method, params)}}
        .dump();
  } catch (const RpcError& e) {
    return error_line(id, e.code, e.what());
  } catch (const std::exception& e) {
    return error_line(id, kInternalError, e.what());
  }
}

void McpServer::serve(int in_fd, int out_fd) {
  std::string buf, line;
  char chunk[65536];
  auto send = [&](const std::string& s) {
    std::string out = s + "\n";
    size_t off = 0;
    while (off < out.size()) {
      ssize_t n = ::write(out_fd, out.data() + off, out.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("mcp: cannot write a response: {}", std::strerror(errno));
      off += size_t(n);
    }
  };
  // `scanned`: bytes of buf already known to hold no newline, so a long line is scanned once.
  // `skipping`: the current line went over the limit; its bytes are dropped until its newline.
  size_t scanned = 0;
  bool skipping = false;
  while (true) {
    ssize_t n = ::read(in_fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, size_t(n));
    size_t start = 0, nl;
    while ((nl = buf.find('\n', std::max(start, scanned))) != std::string::npos) {
      const size_t line_start = start;
      start = nl + 1;
      if (skipping) {
        skipping = false;
        continue;
      }
      if (nl - line_start > kMaxMcpLineBytes) {  // it arrived whole within one read
        send(too_long_line());
        continue;
      }
      line = buf.substr(line_start, nl - line_start);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      if (std::string r = handle_line(line); !r.empty()) send(r);
    }
    buf.erase(0, start);
    scanned = buf.size();
    if (!skipping && buf.size() > kMaxMcpLineBytes) {
      send(too_long_line());
      skipping = true;
    }
    if (skipping) buf.clear(), scanned = 0;
  }
}

}  // namespace clm

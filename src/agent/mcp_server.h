// A Model Context Protocol server over stdio: JSON-RPC 2.0 messages, one per line, with the
// lifecycle (initialize, ping), tools (tools/list, tools/call) and resources (resources/list,
// resources/templates/list, resources/read). The server is generic; clocklm's tools and resources
// are registered by agent/tools.cpp and agent/resources.cpp.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clm {

struct McpTool {
  std::string name, title, description;
  nlohmann::json input_schema;   // JSON Schema of the arguments (checked before the handler runs)
  nlohmann::json output_schema;  // JSON Schema of the structured result
  bool read_only = true;         // annotations.readOnlyHint
  // Returns the structured result (a JSON object). A clm::Error it throws becomes a tool result
  // with isError and the error's one-line message, the line the CLI would print.
  std::function<nlohmann::json(const nlohmann::json& args)> handler;
};

struct McpResource {
  std::string uri, name, description, mime_type;
};

struct McpResources {
  std::function<std::vector<McpResource>()> list;
  std::vector<nlohmann::json> templates;  // {uriTemplate, name, description, mimeType}
  // The text of a resource and its MIME type; throws clm::Error when there is no such resource.
  std::function<std::string(const std::string& uri, std::string& mime_type)> read;
};

// JSON-RPC error codes used by the server.
enum McpErrorCode : int {
  kParseError = -32700,
  kInvalidRequest = -32600,
  kMethodNotFound = -32601,
  kInvalidParams = -32602,
  kInternalError = -32603,
  kResourceNotFound = -32002,
};

// The longest message line read; a longer one is answered with a parse error and skipped. Real
// requests are a few KiB (tool arguments are names, numbers and short lists).
inline constexpr size_t kMaxMcpLineBytes = size_t(16) << 20;

class McpServer {
 public:
  McpServer(std::string name, std::string version, std::string instructions);
  void add_tool(McpTool tool);
  void set_resources(McpResources r) { resources_ = std::move(r); }
  const std::vector<McpTool>& tools() const { return tools_; }

  // Handles one incoming message (one line of text); returns the response line, or "" when
  // nothing is to be sent (notifications, responses).
  std::string handle_line(const std::string& line);
  // Reads messages from in_fd until end of input, writing each response as one line to out_fd.
  // A line over kMaxMcpLineBytes is answered with a parse error and skipped, not buffered.
  void serve(int in_fd, int out_fd);

  // Protocol revisions understood, newest first; initialize answers with the client's when listed.
  static const std::vector<std::string>& protocol_versions();

 private:
  nlohmann::json dispatch(const std::string& method, const nlohmann::json& params);
  nlohmann::json call_tool(const nlohmann::json& params);
  std::string name_, version_, instructions_;
  std::vector<McpTool> tools_;
  McpResources resources_;
};

}  // namespace clm

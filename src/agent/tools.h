// clocklm's side of the MCP server (`clocklm mcp`): the tools of the experiment loop (describe the
// device, configs, data, the experiment queue, results, comparisons, evaluation, sampling, the
// journal) and the resources (docs, experiment files). The tool list is in docs/AGENTS.md.
#pragma once
#include <string>

#include "agent/mcp_server.h"
#include "lab/queue.h"

namespace clm {

struct AgentContext {
  ExperimentQueue queue;
  std::string exe;  // clocklm executable the queue's runner is started from ("" = this one)
};

void add_clocklm_tools(McpServer& server, AgentContext& ctx);
McpResources clocklm_resources(AgentContext& ctx);
// The server `clocklm mcp` runs: every tool and resource above. `ctx` must outlive it.
McpServer make_clocklm_server(AgentContext& ctx);

}  // namespace clm

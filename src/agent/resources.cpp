// clocklm's MCP resources (declared in tools.h): the documentation (clocklm://docs/NAME.md), the
// files of each experiment (clocklm://experiments/ID/FILE) and the rendered journal
// (clocklm://journal). Only a fixed list of experiment files can be read, so a URI can never reach
// outside the queue.
#include <algorithm>
#include <filesystem>
#include <optional>

#include "agent/tools.h"
#include "core/common.h"
#include "lab/journal.h"
#include "lab/process.h"

namespace clm {

namespace fs = std::filesystem;

namespace {

const char* const kDocsPrefix = "clocklm://docs/";
const char* const kExpPrefix = "clocklm://experiments/";

// Experiment files an agent may read, relative to QUEUE/ID.
const std::vector<std::pair<std::string, std::string>> kExpFiles = {
    {"experiment.json", "application/json"},   {"state.json", "application/json"},
    {"journal.json", "application/json"},      {"train.log", "text/plain"},
    {"run/config.json", "application/json"},   {"run/run.json", "application/json"},
    {"run/summary.json", "application/json"},  {"run/metrics.jsonl", "application/jsonl"},
    {"run/profile/profile.txt", "text/plain"}, {"run/profile/profile.json", "application/json"},
    {"run/report.md", "text/markdown"}};

// The docs folder: the source tree's (a build runs from its checkout), else next to the binary.
std::string docs_dir() {
  std::string src = std::string(CLOCKLM_SOURCE_DIR) + "/docs";
  if (fs::is_directory(src)) return src;
  try {
    fs::path p = fs::path(self_exe()).parent_path().parent_path() / "docs";
    if (fs::is_directory(p)) return p.string();
  } catch (const Error&) {
  }
  return "";
}

std::vector<std::string> doc_names() {
  std::vector<std::string> out;
  std::string d = docs_dir();
  if (d.empty()) return out;
  for (const auto& e : fs::directory_iterator(d))
    if (e.path().extension() == ".md") out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

McpResources clocklm_resources(AgentContext& ctx) {
  McpResources r;
  r.templates = {
      {{"uriTemplate", "clocklm://docs/{name}"},
       {"name", "docs"},
       {"description", "clocklm documentation (docs/*.md)"},
       {"mimeType", "text/markdown"}},
      {{"uriTemplate", "clocklm://experiments/{id}/{file}"},
       {"name", "experiment files"},
       {"description",
        "An experiment's experiment.json, state.json, journal.json, train.log, run/config.json, "
        "run/summary.json, run/metrics.jsonl, run/profile/profile.txt, ..."},
       {"mimeType", "application/json"}}};
  r.list = [&ctx] {
    std::vector<McpResource> out;
    for (const auto& n : doc_names())
      out.push_back({kDocsPrefix + n, n, "clocklm documentation: " + n, "text/markdown"});
    out.push_back({"clocklm://journal", "journal.md", "The experiment journal, rendered on read",
                   "text/markdown"});
    for (const auto& e : ctx.queue.list())
      for (const auto& [f, mime] : kExpFiles)
        if (path_exists(e.dir + "/" + f))
          out.push_back({kExpPrefix + e.id + "/" + f, e.id + "/" + f, "", mime});
    return out;
  };
  r.read = [&ctx](const std::string& uri, std::string& mime) -> std::string {
    if (uri.starts_with(kDocsPrefix)) {
      std::string name = uri.substr(std::string(kDocsPrefix).size());
      for (const auto& n : doc_names())
        if (n == name) {
          mime = "text/markdown";
          return read_file(docs_dir() + "/" + n);
        }
      fail("resource not found: {} (no such document)", uri);
    }
    if (uri == "clocklm://journal") {
      mime = "text/markdown";
      return read_file(write_journal(ctx.queue).markdown);
    }
    if (uri.starts_with(kExpPrefix)) {
      std::string rest = uri.substr(std::string(kExpPrefix).size());
      size_t slash = rest.find('/');
      auto id =
          slash == std::string::npos ? std::nullopt : ctx.queue.find_id(rest.substr(0, slash));
      if (id) {
        std::string file = rest.substr(slash + 1);
        for (const auto& [f, m] : kExpFiles)
          if (f == file && path_exists(ctx.queue.dir() + "/" + *id + "/" + f)) {
            mime = m;
            return read_file(ctx.queue.dir() + "/" + *id + "/" + f);
          }
      }
    }
    fail("resource not found: {}", uri);
  };
  return r;
}

}  // namespace clm

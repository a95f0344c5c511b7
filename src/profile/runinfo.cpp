// Run records (see runinfo.h): which code ran (git commit of the source tree), on which machine
// (CPU model, cores, memory, GPUs), with which command line and when. Everything here must work on
// a machine without git, without /proc or without a GPU: missing facts become "unknown"/empty.
#include "profile/runinfo.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "core/common.h"
#include "backend/cuda/device.h"

namespace clm {

#ifndef CLOCKLM_SOURCE_DIR
#define CLOCKLM_SOURCE_DIR "."
#endif

// Runs a shell command and returns its stdout with trailing whitespace removed; "" on failure.
static std::string run_capture(const std::string& cmd) {
  std::FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int rc = ::pclose(f);
  if (rc != 0) return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ')) out.pop_back();
  return out;
}

static std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

std::string git_commit() {
  std::string out = run_capture("git -C " + shell_quote(CLOCKLM_SOURCE_DIR) + " rev-parse HEAD 2>/dev/null");
  if (out.size() != 40) return "unknown";
  for (char c : out)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return "unknown";
  return out;
}

bool git_dirty() {
  // Only tracked files count: untracked scratch files do not change what was built.
  std::string out = run_capture("git -C " + shell_quote(CLOCKLM_SOURCE_DIR) +
                                " status --porcelain --untracked-files=no 2>/dev/null");
  return !out.empty();
}

static std::string trim(std::string s) {
  size_t a = s.find_first_not_of(" \t");
  size_t b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

nlohmann::json machine_info() {
  nlohmann::json j;
  std::string model = "unknown";
  std::set<std::pair<std::string, std::string>> cores;  // (physical id, core id)
  int logical = 0;
  std::string flags;
  {
    std::ifstream f("/proc/cpuinfo");
    std::string line, phys = "0";
    while (std::getline(f, line)) {
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = trim(line.substr(0, colon)), val = trim(line.substr(colon + 1));
      if (key == "processor") ++logical;
      else if (key == "model name" && model == "unknown") model = val;
      else if (key == "physical id") phys = val;
      else if (key == "core id") cores.insert({phys, val});
      else if (key == "flags" && flags.empty()) flags = " " + val + " ";
    }
  }
  unsigned hw = std::thread::hardware_concurrency();
  if (logical == 0) logical = int(hw);
  j["cpu_model"] = model;
  j["cores"] = cores.empty() ? logical : int(cores.size());
  j["logical_cpus"] = logical;
  j["threads"] = default_threads();
  // The SIMD features that decide which kernels are fast here.
  nlohmann::json feats = nlohmann::json::array();
  for (const char* ft : {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile"})
    if (flags.find(std::string(" ") + ft + " ") != std::string::npos) feats.push_back(ft);
  j["cpu_features"] = feats;
  double mem_gb = 0;
  {
    std::ifstream f("/proc/meminfo");
    std::string key;
    double kb;
    while (f >> key >> kb) {
      if (key == "MemTotal:") {
        mem_gb = kb / (1024.0 * 1024.0);
        break;
      }
      f.ignore(1 << 10, '\n');
    }
  }
  j["memory_gb"] = std::round(mem_gb * 10) / 10;
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& d : cuda_devices()) {
    gpus.push_back({{"index", d.index},
                    {"name", d.name},
                    {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
                    {"memory_gb", std::round(double(d.total_memory) / (1 << 30) * 10) / 10},
                    {"sm_count", d.sm_count}});
  }
  j["gpus"] = gpus;
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "unknown");
  j["hostname"] = std::string(host);
  struct utsname u;
  if (::uname(&u) == 0) j["os"] = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  return j;
}

std::string utc_now_iso8601() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::json run_record(const std::vector<std::string>& argv) {
  nlohmann::json j;
  std::string cmd;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (i) cmd += ' ';
    bool plain = !argv[i].empty() && argv[i].find_first_of(" \t\"'\\$`*?;&|<>()") == std::string::npos;
    cmd += plain ? argv[i] : shell_quote(argv[i]);
  }
  j["command"] = cmd;
  j["argv"] = argv;
  j["version"] = CLOCKLM_VERSION;
  j["git_commit"] = git_commit();
  j["git_dirty"] = git_dirty();
  j["machine"] = machine_info();
  j["start_time"] = utc_now_iso8601();
  char cwd[4096];
  if (::getcwd(cwd, sizeof cwd)) j["cwd"] = std::string(cwd);
  return j;
}

}  // namespace clm

// Facts recorded with every run: clocklm version, git commit of the source, machine description.
// The training loop writes them into RUN/run.json.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clm {

std::string git_commit();            // commit of the clocklm source tree ("unknown" if not a checkout)
bool git_dirty();                    // tracked files of the source tree modified since that commit
// {cpu_model, cores, logical_cpus, threads, cpu_features, memory_gb, gpus: [...], hostname, os}
nlohmann::json machine_info();
std::string utc_now_iso8601();       // e.g. "2026-11-30T09:15:03Z"
// The run.json object: command (shell-quoted), argv, version, git_commit, git_dirty, machine,
// start_time (UTC ISO-8601), cwd. The training loop adds the dataset fields.
nlohmann::json run_record(const std::vector<std::string>& argv);

}  // namespace clm

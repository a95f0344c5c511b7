// Facts recorded with every run: clocklm version, git commit of the source, machine description.
// Owned by issue 5; written by the training loop into RUN/run.json.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace clm {

std::string git_commit();            // commit of the clocklm source tree ("unknown" if not a checkout)
nlohmann::json machine_info();       // {cpu_model, cores, threads, memory_gb, gpus: [...], hostname}
// The run.json object: command line, version, commit, machine, start time (UTC ISO-8601).
nlohmann::json run_record(const std::vector<std::string>& argv);

}  // namespace clm

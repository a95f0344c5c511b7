// The experiment queue's storage and state changes (see queue.h). Every change of state.json
// happens under an exclusive flock on QUEUE/queue.lock and is written atomically, so a reader sees
// a complete file and two processes never lose each other's change.
#include "lab/queue.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "config/config.h"
#include "core/common.h"
#include "core/json_parse.h"
#include "data/dataset.h"
#include "lab/process.h"
#include "profile/runinfo.h"
#include "report/runs.h"

namespace clm {

namespace fs = std::filesystem;

namespace {

// Exclusive lock on a file for the lifetime of the object (close-on-exec: never handed to
// children).
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open {}: {}", path, std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) fail("cannot lock {}: {}", path, std::strerror(errno));
  }
  ~FileLock() { ::close(fd_); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

std::string id_of(int n) { return fmt::format("exp-{:04d}", n); }

std::string absolute(const std::string& p) {
  return p.empty() ? p : fs::absolute(p).lexically_normal().string();
}

nlohmann::json read_json(const std::string& path) {
  std::string text = read_file(path);
  return parse_json(text, path);
}

// The reason a training process failed: the last error line it printed, else its exit status.
std::string failure_reason(const std::string& log, int rc) {
  std::string last;
  if (path_exists(log)) {
    std::string text = read_file(log);
    const std::string tag = "clocklm: error: ";
    size_t p = text.rfind(tag);
    if (p != std::string::npos) {
      size_t e = text.find('\n', p);
      last = text.substr(p + tag.size(),
                         e == std::string::npos ? std::string::npos : e - p - tag.size());
    }
  }
  if (!last.empty()) return "training failed: " + last;
  if (rc > 128) return fmt::format("clocklm train was killed by signal {}", rc - 128);
  return fmt::format("clocklm train exited with status {}", rc);
}

double last_step(const std::string& run_dir) {
  try {
    RunData r = load_run(run_dir);
    return r.steps();
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

// ---- spec ---------------------------------------------------------------------------------

nlohmann::json to_json(const ExperimentSpec& s) {
  return {{"name", s.name},
          {"config", s.config},
          {"set", s.sets},
          {"data", s.data},
          {"budget", s.budget},
          {"budget_seconds", s.budget_seconds},
          {"hypothesis", s.hypothesis},
          {"baseline", s.baseline},
          {"profile", s.profile},
          {"device", s.device},
          {"submitter", s.submitter}};
}

ExperimentSpec experiment_spec_from_json(const nlohmann::json& j) {
  ExperimentSpec s;
  s.name = j.value("name", "");
  s.config = j.value("config", "");
  s.sets = j.value("set", std::vector<std::string>{});
  s.data = j.value("data", "");
  s.budget = j.value("budget", "");
  s.budget_seconds = j.value("budget_seconds", 0.0);
  s.hypothesis = j.value("hypothesis", "");
  s.baseline = j.value("baseline", "");
  s.profile = j.value("profile", false);
  s.device = j.value("device", "auto");
  s.submitter = j.value("submitter", "");
  return s;
}

// ---- runner lock --------------------------------------------------------------------------

std::optional<RunnerLock> RunnerLock::try_acquire(const std::string& queue_dir) {
  // No O_CLOEXEC on purpose: the training children inherit the lock (see queue.h).
  int fd = ::open((queue_dir + "/runner.lock").c_str(), O_RDWR | O_CREAT, 0644);
  if (fd < 0) fail("cannot open {}/runner.lock: {}", queue_dir, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  return RunnerLock(fd);
}

RunnerLock::~RunnerLock() {
  if (fd_ >= 0) ::close(fd_);
}

// ---- queue --------------------------------------------------------------------------------

ExperimentQueue::ExperimentQueue(std::string dir) : dir_(std::move(dir)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

bool ExperimentQueue::exists() const { return fs::is_directory(dir_); }

QueueSettings ExperimentQueue::settings() const {
  QueueSettings s;
  std::string p = dir_ + "/queue.json";
  if (!path_exists(p)) return s;
  auto j = read_json(p);
  if (j.contains("cap_device_seconds") && j["cap_device_seconds"].is_number())
    s.cap_seconds = j["cap_device_seconds"].get<double>();
  s.data = j.value("data", "");
  s.baseline = j.value("baseline", "");
  return s;
}

void ExperimentQueue::configure(const QueueSettings& s) {
  make_dirs(dir_);
  FileLock lock(dir_ + "/queue.lock");
  nlohmann::json j = {
      {"data", absolute(s.data)}, {"baseline", s.baseline}, {"updated", utc_now_iso8601()}};
  j["cap_device_seconds"] = s.cap_seconds >= 0 ? nlohmann::json(s.cap_seconds) : nlohmann::json();
  atomic_write(dir_ + "/queue.json", j.dump(2) + "\n");
}

std::vector<std::string> ExperimentQueue::ids() const {
  std::vector<std::string> out;
  if (!exists()) return out;
  for (const auto& e : fs::directory_iterator(dir_)) {
    std::string n = e.path().filename().string();
    // Only complete submissions: state.json is written last.
    if (n.starts_with("exp-") && e.is_directory() && path_exists(e.path().string() + "/state.json"))
      out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> ExperimentQueue::find_id(const std::string& s) const {
  std::string t = s.starts_with("exp-") ? s.substr(4) : s;
  if (t.empty() || t.size() > 9 ||
      !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  std::string id = id_of(std::stoi(t));
  if (!path_exists(dir_ + "/" + id + "/state.json")) return std::nullopt;
  return id;
}

Experiment ExperimentQueue::load(const std::string& id) const {
  Experiment e;
  e.id = id;
  e.dir = dir_ + "/" + id;
  auto spec = read_json(e.dir + "/experiment.json");
  e.spec = experiment_spec_from_json(spec);
  e.submitted = spec.value("submitted", "");
  e.state = read_json(e.dir + "/state.json");
  return e;
}

void ExperimentQueue::save_state(const Experiment& e) const {
  atomic_write(e.dir + "/state.json", e.state.dump(2) + "\n");
}

bool ExperimentQueue::runner_active() const {
  if (!exists()) return false;
  int fd = ::open((dir_ + "/runner.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

nlohmann::json ExperimentQueue::runner_info() const {
  if (!runner_active() || !path_exists(dir_ + "/runner.json")) return nullptr;
  try {
    return read_json(dir_ + "/runner.json");
  } catch (const Error&) {
    return nullptr;
  }
}

void ExperimentQueue::settle_orphans(bool runner_gone) {
  if (!runner_gone) return;
  for (const auto& id : ids()) {
    Experiment e = load(id);
    if (e.status() != "running") continue;
    auto& st = e.state;
    auto& a = st["attempts"].back();
    std::string run = e.run_dir();
    a["ended"] = utc_now_iso8601();
    a["device_seconds"] =
        std::max(0.0, run_device_seconds(run) - a.value("start_device_seconds", 0.0));
    a["outcome"] = "runner died";
    std::string who = fmt::format("the runner (pid {}) stopped during attempt {}",
                                  a.value("runner_pid", 0), st["attempts"].size());
    if (st.value("cancel_requested", false)) {
      st["state"] = "cancelled";
      st["reason"] = "cancelled while running; " + who;
      st["finished"] = utc_now_iso8601();
    } else if (path_exists(run + "/summary.json")) {
      st["state"] = "done";
      st["reason"] = "";
      st["finished"] = utc_now_iso8601();
    } else if (has_checkpoint(run)) {
      st["state"] = "queued";
      st["note"] =
          fmt::format("{} at step {}; queued to resume from its checkpoint", who, last_step(run));
    } else {
      st["state"] = "failed";
      st["reason"] =
          who +
          " before the run wrote a checkpoint, so there is nothing to resume (submit it again)";
      st["finished"] = utc_now_iso8601();
    }
    save_state(e);
  }
}

Experiment ExperimentQueue::submit(ExperimentSpec s) {
  if (s.config.empty()) fail("submit: a config (preset name or JSON file) is required");
  if (s.config.find('/') != std::string::npos || s.config.ends_with(".json"))
    s.config = absolute(s.config);
  load_config(s.config, s.sets);  // unknown keys and invalid values fail now, not in the runner
  if (s.budget.empty()) fail("submit: a device-time budget is required (e.g. 90s, 5m)");
  s.budget_seconds = parse_duration(s.budget);
  if (s.budget_seconds <= 0) fail("submit: the budget must be positive (got '{}')", s.budget);
  QueueSettings qs = settings();
  if (s.data.empty()) s.data = qs.data;
  if (s.data.empty())
    fail(
        "submit: no dataset given and the queue {} has no default (clocklm exp init --queue {} "
        "--data DIR)",
        dir_, dir_);
  s.data = absolute(s.data);
  read_dataset_info(s.data);  // a folder made by `clocklm prepare`, or a one-line error
  if (s.baseline.empty()) s.baseline = qs.baseline;
  if (!s.baseline.empty()) {
    if (auto id = find_id(s.baseline))
      s.baseline = *id;
    else if (fs::is_directory(s.baseline))
      s.baseline = absolute(s.baseline);
    else
      fail("submit: baseline '{}' is neither an experiment of {} nor a run directory", s.baseline,
           dir_);
  }

  make_dirs(dir_);
  FileLock lock(dir_ + "/queue.lock");
  settle_orphans(!runner_active());
  check_cap(ledger_locked(), s.budget_seconds, dir_);
  auto existing = ids();
  int n = existing.empty() ? 1 : std::stoi(existing.back().substr(4)) + 1;
  Experiment e;
  for (;; ++n) {  // mkdir is atomic: the first process to create a folder owns its id
    e.id = id_of(n);
    e.dir = dir_ + "/" + e.id;
    if (::mkdir(e.dir.c_str(), 0755) == 0) break;
    if (errno != EEXIST) fail("cannot create {}: {}", e.dir, std::strerror(errno));
  }
  e.spec = s;
  e.submitted = utc_now_iso8601();
  nlohmann::json spec = to_json(s);
  spec["id"] = e.id;
  spec["submitted"] = e.submitted;
  atomic_write(e.dir + "/experiment.json", spec.dump(2) + "\n");
  e.state = {{"state", "queued"}, {"attempts", nlohmann::json::array()}};
  save_state(e);
  return e;
}

std::vector<Experiment> ExperimentQueue::list() {
  if (!exists()) return {};
  FileLock lock(dir_ + "/queue.lock");
  settle_orphans(!runner_active());
  std::vector<Experiment> out;
  for (const auto& id : ids()) out.push_back(load(id));
  return out;
}

Experiment ExperimentQueue::get(const std::string& id) {
  auto norm = find_id(id);
  if (!norm) fail("no experiment '{}' in {}", id, dir_);
  FileLock lock(dir_ + "/queue.lock");
  settle_orphans(!runner_active());
  return load(*norm);
}

Experiment ExperimentQueue::cancel(const std::string& id) {
  auto norm = find_id(id);
  if (!norm) fail("no experiment '{}' in {}", id, dir_);
  FileLock lock(dir_ + "/queue.lock");
  settle_orphans(!runner_active());
  Experiment e = load(*norm);
  auto& st = e.state;
  if (e.status() == "queued") {
    st["state"] = "cancelled";
    st["reason"] =
        st["attempts"].empty() ? "cancelled before it started" : "cancelled while queued to resume";
    st["finished"] = utc_now_iso8601();
  } else if (e.status() == "running") {
    st["cancel_requested"] = true;
    // The trainer stops at the end of its step on SIGTERM and writes a checkpoint.
    pid_t child = st["attempts"].back().value("child_pid", 0);
    if (child > 0 && process_alive(child)) ::kill(child, SIGTERM);
  } else {
    fail("experiment {} has already finished ({})", e.id, e.status());
  }
  save_state(e);
  return e;
}

Ledger ExperimentQueue::ledger_locked() {
  Ledger l;
  l.cap = settings().cap_seconds;
  for (const auto& id : ids()) {
    Experiment e = load(id);
    l.charge(e.state, e.spec.budget_seconds, e.run_dir());
  }
  return l;
}

Ledger ExperimentQueue::ledger() {
  if (!exists()) {
    Ledger l;
    return l;
  }
  FileLock lock(dir_ + "/queue.lock");
  settle_orphans(!runner_active());
  return ledger_locked();
}

std::string ExperimentQueue::resolve_run(const std::string& s) {
  if (auto id = find_id(s)) return dir_ + "/" + *id + "/run";
  if (fs::is_directory(s)) return s;
  fail("'{}' is neither an experiment of {} nor a run directory", s, dir_);
}

// ---- runner side --------------------------------------------------------------------------

bool ExperimentQueue::has_queued() {
  for (const auto& e : list())
    if (e.status() == "queued") return true;
  return false;
}

std::optional<Experiment> ExperimentQueue::claim_next(pid_t runner_pid) {
  FileLock lock(dir_ + "/queue.lock");
  settle_orphans(true);  // the caller holds the runner lock: nothing else can be running
  for (const auto& id : ids()) {
    Experiment e = load(id);
    if (e.status() != "queued") continue;
    auto& st = e.state;
    std::string run = e.run_dir();
    bool resume = has_checkpoint(run);
    if (!resume && path_exists(run)) {
      // Left by an attempt that died before its first checkpoint: kept for inspection.
      std::error_code ec;
      fs::rename(run, fmt::format("{}.attempt-{}", run, st["attempts"].size()), ec);
    }
    nlohmann::json a = {{"started", utc_now_iso8601()},
                        {"runner_pid", runner_pid},
                        {"resumed", resume},
                        {"start_device_seconds", resume ? checkpoint_device_seconds(run) : 0.0}};
    st["attempts"].push_back(a);
    st["state"] = "running";
    if (!st.contains("started")) st["started"] = a["started"];
    save_state(e);
    return e;
  }
  return std::nullopt;
}

void ExperimentQueue::set_child(const std::string& id, pid_t child) {
  FileLock lock(dir_ + "/queue.lock");
  Experiment e = load(id);
  e.state["attempts"].back()["child_pid"] = child;
  save_state(e);
}

Experiment ExperimentQueue::finish_attempt(const std::string& id, int rc) {
  FileLock lock(dir_ + "/queue.lock");
  Experiment e = load(id);
  auto& st = e.state;
  auto& a = st["attempts"].back();
  std::string run = e.run_dir();
  a["ended"] = utc_now_iso8601();
  a["exit_status"] = rc;
  a["device_seconds"] =
      std::max(0.0, run_device_seconds(run) - a.value("start_device_seconds", 0.0));
  st["finished"] = a["ended"];
  st.erase("note");
  if (rc == 0 && path_exists(run + "/summary.json")) {
    st["state"] = "done";
    st["reason"] = "";
    a["outcome"] = "done";
  } else if (st.value("cancel_requested", false)) {
    st["state"] = "cancelled";
    st["reason"] = fmt::format("cancelled while running, at step {}{}", last_step(run),
                               has_checkpoint(run) ? " (checkpoint kept)" : "");
    a["outcome"] = "cancelled";
  } else {
    st["state"] = "failed";
    st["reason"] = failure_reason(e.log_path(), rc);
    a["outcome"] = "failed";
  }
  save_state(e);
  return e;
}

// ---- views --------------------------------------------------------------------------------

nlohmann::json experiment_json(const Experiment& e) {
  const auto& st = e.state;
  nlohmann::json j = {{"id", e.id},
                      {"name", e.spec.name},
                      {"state", e.status()},
                      {"reason", st.value("reason", "")},
                      {"config", e.spec.config},
                      {"set", e.spec.sets},
                      {"budget", e.spec.budget},
                      {"budget_seconds", e.spec.budget_seconds},
                      {"data", e.spec.data},
                      {"hypothesis", e.spec.hypothesis},
                      {"baseline", e.spec.baseline},
                      {"submitter", e.spec.submitter},
                      {"submitted", e.submitted},
                      {"started", st.value("started", "")},
                      {"finished", st.value("finished", "")},
                      {"attempts", st.contains("attempts") ? st["attempts"].size() : 0},
                      {"device_seconds", experiment_device_seconds(st, e.run_dir())},
                      {"run_dir", e.run_dir()}};
  if (st.contains("note")) j["note"] = st["note"];
  if (path_exists(e.run_dir() + "/metrics.jsonl")) {
    try {
      RunData r = load_run(e.run_dir());
      auto num = [](double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); };
      j["steps"] = num(r.steps());
      j["val_bpb"] = num(r.val_bpb());
      j["tokens_per_second"] = num(r.tokens_per_second());
      j["run_device_seconds"] = num(r.device_seconds());
    } catch (const std::exception&) {
      // A run being written may be unreadable for a moment; the state is still worth showing.
    }
  }
  return j;
}

}  // namespace clm

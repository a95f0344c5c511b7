// Run index for the dashboard (see run_index.h).
#include "serve/run_index.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/common.h"
#include "core/json_parse.h"

namespace clm {

namespace fs = std::filesystem;

const char* run_status_name(RunStatus s) {
  switch (s) {
    case RunStatus::running: return "running";
    case RunStatus::done: return "done";
    case RunStatus::failed: return "failed";
    case RunStatus::queued: return "queued";
  }
  return "?";
}

HeldLocks HeldLocks::read() {
  HeldLocks h;
  // Lines read "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF" (a "->" marks a waiter, which
  // holds nothing); the device is MAJOR:MINOR in hex, the inode in decimal.
  std::ifstream f("/proc/locks");
  std::string line;
  while (std::getline(f, line)) {
    if (line.find("->") != std::string::npos) continue;
    std::istringstream in(line);
    std::string num, kind, mode, rw, pid, where;
    if (!(in >> num >> kind >> mode >> rw >> pid >> where)) continue;
    unsigned maj = 0, min = 0;
    unsigned long long ino = 0;
    if (std::sscanf(where.c_str(), "%x:%x:%llu", &maj, &min, &ino) != 3) continue;
    h.files.insert({uint64_t(maj) << 32 | min, ino});
  }
  return h;
}

bool HeldLocks::held(const std::string& path) const {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  return files.count({uint64_t(major(st.st_dev)) << 32 | minor(st.st_dev), uint64_t(st.st_ino)}) > 0;
}

bool lock_is_held(const std::string& path) { return HeldLocks::read().held(path); }

namespace {

IndexedRun::Stamp stamp_of(const std::string& path) {
  struct stat st;
  IndexedRun::Stamp s;
  if (::stat(path.c_str(), &st) != 0) return s;
  s.size = st.st_size;
  s.mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  s.inode = st.st_ino;
  return s;
}

}  // namespace

nlohmann::json read_shown_json(const std::string& path, uint64_t max_bytes) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) {
    if (!path_exists(path)) return nullptr;
    fail("{}: cannot read its size: {}", path, ec.message());
  }
  if (size > max_bytes) fail("{}: {} bytes, over the {} bytes a shown file may have", path, size, max_bytes);
  return parse_json(read_file(path), path);
}

namespace {

// Reads metrics.jsonl from `offset` up to its last newline before `max_bytes`; appends the rows to
// `rows`. A file that reaches `max_bytes` gets one warning and is read no further.
uint64_t read_metrics_tail(const std::string& path, uint64_t offset, uint64_t max_bytes,
                           std::vector<nlohmann::json>& rows, std::vector<std::string>* warnings) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return offset;
  f.seekg(0, std::ios::end);
  const uint64_t full = uint64_t(f.tellg()), size = std::min(full, max_bytes);
  if (size <= offset) return offset;
  std::string text(size - offset, '\0');
  f.seekg(std::streamoff(offset));
  f.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(f.gcount()));
  // Up to the last newline; a line still being written waits for the next read.
  const size_t end = text.rfind('\n');
  text.resize(end == std::string::npos ? 0 : end + 1);
  for (auto& row : parse_metrics(text, path, warnings)) rows.push_back(std::move(row));
  if (full <= max_bytes) return offset + text.size();
  warnings->push_back(fmt::format("metrics.jsonl: only its first {} bytes are shown", offset + text.size()));
  return max_bytes;
}

// The experiment state of a run inside a queue (QUEUE/exp-NNNN/run), else "".
std::string queue_state_of(const std::string& dir) {
  fs::path p(dir);
  if (p.filename() != "run" || !p.parent_path().filename().string().starts_with("exp-")) return "";
  const std::string state = (p.parent_path() / "state.json").string();
  if (!path_exists(state)) return "";
  try {
    return read_shown_json(state).value("state", "");
  } catch (const Error&) {
    return "";
  }
}

RunStatus status_of(const IndexedRun& r, const HeldLocks& locks) {
  if (locks.held(r.dir + "/.lock")) return RunStatus::running;
  if (r.data.finished()) return RunStatus::done;
  if (r.queue_state == "queued" || r.queue_state == "running") return RunStatus::queued;
  return RunStatus::failed;
}

}  // namespace

// Whether nothing `update_run` reads has changed since `prev` was made: then it is reused as it
// is, so an idle run costs a few stat calls per poll and no copy.
static bool unchanged(const IndexedRun& prev, const HeldLocks& locks) {
  for (const char* name : {"config.json", "run.json", "summary.json", "metrics.jsonl"}) {
    auto it = prev.stamps.find(name);
    if (it == prev.stamps.end() || !(it->second == stamp_of(prev.dir + "/" + name))) return false;
  }
  return queue_state_of(prev.dir) == prev.queue_state && status_of(prev, locks) == prev.status;
}

static std::shared_ptr<IndexedRun> update_run(const IndexedRun* prev, const std::string& id,
                                              const std::string& dir, const std::string& root,
                                              const HeldLocks& locks, const ServeReadLimits& lim);

static std::shared_ptr<const IndexedRun> refresh_run(const std::shared_ptr<const IndexedRun>& prev,
                                                     const std::string& id, const std::string& dir,
                                                     const std::string& root, const HeldLocks& locks,
                                                     const ServeReadLimits& lim) {
  if (prev && unchanged(*prev, locks)) return prev;
  return update_run(prev.get(), id, dir, root, locks, lim);
}

// Rereads what changed in `prev` (a fresh run when null). Throws Error when a file is malformed.
static std::shared_ptr<IndexedRun> update_run(const IndexedRun* prev, const std::string& id,
                                              const std::string& dir, const std::string& root,
                                              const HeldLocks& locks, const ServeReadLimits& lim) {
  auto r = prev ? std::make_shared<IndexedRun>(*prev) : std::make_shared<IndexedRun>();
  r->id = id;
  r->dir = dir;
  r->root = root;
  r->data.dir = dir;
  r->data.name = fs::path(dir).filename().string();
  struct JsonFile {
    const char* name;
    nlohmann::json RunData::*field;
  };
  for (const JsonFile& jf : {JsonFile{"config.json", &RunData::config}, JsonFile{"run.json", &RunData::run},
                             JsonFile{"summary.json", &RunData::summary}}) {
    const std::string path = dir + "/" + jf.name;
    const IndexedRun::Stamp s = stamp_of(path);
    if (r->stamps[jf.name] == s && prev) continue;
    r->data.*jf.field = read_shown_json(path, lim.json_bytes);
    r->stamps[jf.name] = s;
  }
  const std::string metrics = dir + "/metrics.jsonl";
  const IndexedRun::Stamp ms = stamp_of(metrics);
  const IndexedRun::Stamp old = r->stamps["metrics.jsonl"];
  // A resumed run rewrites metrics.jsonl (a new file, or a shorter one): read it again whole.
  if (ms.inode != old.inode || ms.size < int64_t(r->metrics_offset)) {
    r->data.metrics.clear();
    r->data.warnings.clear();
    r->metrics_offset = 0;
  }
  if (ms.size > int64_t(r->metrics_offset))
    r->metrics_offset = read_metrics_tail(metrics, r->metrics_offset, lim.metrics_bytes, r->data.metrics,
                                          &r->data.warnings);
  r->stamps["metrics.jsonl"] = ms;
  r->queue_state = queue_state_of(dir);
  r->status = status_of(*r, locks);
  int64_t newest = 0;
  for (const auto& [name, s] : r->stamps) newest = std::max(newest, s.mtime_ns);
  r->updated = double(newest) / 1e9;
  return r;
}

RunIndex::RunIndex(std::vector<std::string> roots, ServeReadLimits limits)
    : roots_(std::move(roots)), limits_(limits) {
  std::error_code ec;
  for (const auto& root : roots_) {
    if (!fs::is_directory(root, ec)) fail("serve: {} is not a folder", root);
    std::string name = fs::weakly_canonical(root, ec).filename().string();
    root_names_.push_back(name.empty() ? root : name);
  }
}

void RunIndex::refresh() {
  std::lock_guard<std::mutex> one(refresh_mu_);
  std::map<std::string, std::shared_ptr<const IndexedRun>> prev;
  {
    std::lock_guard<std::mutex> g(mu_);
    prev = runs_;
  }
  std::map<std::string, std::shared_ptr<const IndexedRun>> next;
  std::vector<std::string> errors;
  const HeldLocks locks = HeldLocks::read();
  for (size_t i = 0; i < roots_.size(); ++i) {
    std::error_code ec;
    const fs::path real_root = fs::canonical(roots_[i], ec);
    std::vector<std::string> dirs;
    try {
      dirs = find_runs(roots_[i]);
    } catch (const Error& e) {
      errors.push_back(e.what());
      continue;
    }
    for (const auto& d : dirs) {
      // A symlink that leads out of the root is not followed.
      const fs::path real = fs::canonical(d, ec);
      if (ec || real.string().rfind(real_root.string() + "/", 0) != 0) continue;
      std::string rel = fs::relative(d, roots_[i], ec).generic_string();
      if (rel.empty() || rel == ".") rel = root_names_[i];
      const std::string id = roots_.size() > 1 ? root_names_[i] + "/" + rel : rel;
      if (next.count(id)) continue;
      auto it = prev.find(id);
      try {
        next[id] = refresh_run(it == prev.end() ? nullptr : it->second, id, d, roots_[i], locks, limits_);
      } catch (const Error& e) {
        errors.push_back(e.what());
        if (it != prev.end()) next[id] = it->second;
      }
    }
  }
  for (size_t i = 0; i < roots_.size(); ++i) add_queued(i, next);
  std::lock_guard<std::mutex> g(mu_);
  runs_ = std::move(next);
  errors_ = std::move(errors);
}

// Experiments waiting in a queue (the root itself, or a folder right below it) that have no run
// folder yet: listed as queued under the id their run will have.
void RunIndex::add_queued(size_t i, std::map<std::string, std::shared_ptr<const IndexedRun>>& out) const {
  std::error_code ec;
  std::vector<fs::path> queues{fs::path(roots_[i])};
  for (const auto& e : fs::directory_iterator(roots_[i], ec))
    if (e.is_directory(ec) && !e.is_symlink(ec)) queues.push_back(e.path());
  for (const auto& q : queues) {
    for (const auto& e : fs::directory_iterator(q, ec)) {
      const fs::path exp = e.path();
      if (!exp.filename().string().starts_with("exp-") || e.is_symlink(ec)) continue;
      if (!path_exists((exp / "state.json").string()) || fs::exists(exp / "run", ec)) continue;
      try {
        const nlohmann::json state = read_shown_json((exp / "state.json").string(), limits_.json_bytes);
        const nlohmann::json spec = read_shown_json((exp / "experiment.json").string(), limits_.json_bytes);
        if (state.value("state", "") != "queued") continue;
        std::string rel = fs::relative(exp / "run", roots_[i], ec).generic_string();
        const std::string id = roots_.size() > 1 ? root_names_[i] + "/" + rel : rel;
        auto r = std::make_shared<IndexedRun>();
        r->id = id;
        r->dir = (exp / "run").string();
        r->root = roots_[i];
        r->data.dir = r->dir;
        r->data.name = exp.filename().string();
        r->data.config = {{"name", spec.value("name", "").empty() ? spec.value("config", "?")
                                                                  : spec.value("name", "")},
                          {"train", {{"budget_seconds", spec.value("budget_seconds", 0.0)}}}};
        r->status = RunStatus::queued;
        r->queue_state = "queued";
        out[id] = r;
      } catch (const Error&) {
        // A submission being written: it shows on the next poll.
      }
    }
  }
}

void RunIndex::refresh_one(const std::string& id) {
  std::lock_guard<std::mutex> one(refresh_mu_);
  std::shared_ptr<const IndexedRun> prev = find(id);
  if (!prev || (prev->status == RunStatus::queued && !path_exists(prev->dir))) return;
  std::shared_ptr<const IndexedRun> next;
  try {
    next = refresh_run(prev, id, prev->dir, prev->root, HeldLocks::read(), limits_);
  } catch (const Error&) {
    return;  // the next full refresh lists the error
  }
  std::lock_guard<std::mutex> g(mu_);
  runs_[id] = next;
}

std::vector<std::shared_ptr<const IndexedRun>> RunIndex::runs() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<std::shared_ptr<const IndexedRun>> out;
  for (const auto& [id, r] : runs_) out.push_back(r);
  return out;
}

std::shared_ptr<const IndexedRun> RunIndex::find(const std::string& id) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = runs_.find(id);
  return it == runs_.end() ? nullptr : it->second;
}

std::vector<std::string> RunIndex::errors() const {
  std::lock_guard<std::mutex> g(mu_);
  return errors_;
}

}  // namespace clm

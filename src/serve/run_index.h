// The runs a dashboard shows: every run folder under the folders it was given, each under a stable
// id (its path relative to its folder), kept loaded and brought up to date cheaply on every poll:
// a metrics.jsonl that grew is read from where the last read stopped, the small JSON files only
// when their size or time changed. Reading never writes, locks or blocks a run being trained.
// Clients name runs only by id, so no request can reach a path the index did not find itself.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/runs.h"

namespace clm {

// running: a process holds RUN/.lock; done: summary.json exists; failed: neither (the process
// died or was stopped before finishing); queued: an experiment queue holds it, not started yet.
enum class RunStatus { running, done, failed, queued };
const char* run_status_name(RunStatus s);

// The files some process holds a lock on (flock or POSIX), read once from /proc/locks: taking a
// lock to test it could make a training process that starts at that moment refuse its folder.
struct HeldLocks {
  std::set<std::pair<uint64_t, uint64_t>> files;  // (device, inode)
  static HeldLocks read();
  bool held(const std::string& path) const;
};
bool lock_is_held(const std::string& path);  // HeldLocks::read().held(path)

// What the dashboard reads of a run folder is bounded, so a stray huge file placed in a served
// folder costs neither the server's memory nor its time: a JSON file the pages show (config, run,
// summary, plan, profile, queue and experiment files) over `json_bytes` is refused with a one-line
// error, and metrics.jsonl is read up to `metrics_bytes` (a 30-minute run writes about 3 MB); what
// lies past that is not shown and the run carries a warning that says so.
struct ServeReadLimits {
  uint64_t json_bytes = uint64_t(16) << 20;
  uint64_t metrics_bytes = uint64_t(256) << 20;
};

// The one reader of a shown JSON file: null when the file does not exist; throws Error (one line,
// naming the file) when it is over `max_bytes` or malformed.
nlohmann::json read_shown_json(const std::string& path, uint64_t max_bytes = ServeReadLimits{}.json_bytes);

struct IndexedRun {
  std::string id;       // "ROOTNAME/rel/path" (the root's folder name first when several roots)
  std::string dir;      // the folder, as found under its root
  std::string root;     // the root it was found under
  RunData data;         // metrics are complete lines only; a torn last line waits for the next poll
  RunStatus status = RunStatus::failed;
  std::string queue_state;  // the experiment's state when the run belongs to a queue, else ""
  double updated = 0;       // newest modification time of its files (seconds since the epoch)

  // What a refresh compares to decide what to reread.
  struct Stamp {
    int64_t size = -1;
    int64_t mtime_ns = -1;
    uint64_t inode = 0;
    bool operator==(const Stamp&) const = default;
  };
  std::map<std::string, Stamp> stamps;  // file name -> last read stamp
  uint64_t metrics_offset = 0;          // bytes of metrics.jsonl already parsed
};

class RunIndex {
 public:
  // Throws Error when a root is not a folder.
  explicit RunIndex(std::vector<std::string> roots, ServeReadLimits limits = {});
  const std::vector<std::string>& roots() const { return roots_; }

  // Finds new runs, drops vanished ones and brings every run up to date. Runs that fail to load
  // keep their last good state and are listed in errors(). Safe to call from several threads.
  void refresh();
  // Brings one known run up to date (what a page watching one run needs each second).
  void refresh_one(const std::string& id);
  // The runs in id order (a copy, consistent with one refresh).
  std::vector<std::shared_ptr<const IndexedRun>> runs() const;
  std::shared_ptr<const IndexedRun> find(const std::string& id) const;  // null when unknown
  std::vector<std::string> errors() const;

 private:
  void add_queued(size_t root, std::map<std::string, std::shared_ptr<const IndexedRun>>& out) const;

  std::vector<std::string> roots_;
  ServeReadLimits limits_;
  std::vector<std::string> root_names_;
  mutable std::mutex mu_;
  std::mutex refresh_mu_;  // one refresh at a time; readers never wait on file reads
  std::map<std::string, std::shared_ptr<const IndexedRun>> runs_;
  std::vector<std::string> errors_;
};


}  // namespace clm

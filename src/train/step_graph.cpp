// Recorded training steps (see step_graph.h).
#include "train/step_graph.h"

#include <cstdio>

#include "core/common.h"

namespace clm {

GraphMode graph_mode_from_name(const std::string& name) {
  if (name == "off") return GraphMode::Off;
  if (name == "auto") return GraphMode::Auto;
  if (name == "on") return GraphMode::On;
  fail("train.graph is '{}': expected auto, on or off", name);
}

const char* graph_mode_name(GraphMode m) {
  return m == GraphMode::Off ? "off" : m == GraphMode::On ? "on" : "auto";
}

StepGraph::Entry& StepGraph::entry(const StepKey& key) {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].key == key) {
      Entry e = std::move(entries_[i]);
      entries_.erase(entries_.begin() + std::ptrdiff_t(i));
      entries_.push_back(std::move(e));
      return entries_.back();
    }
  if (entries_.size() >= kKeep) entries_.erase(entries_.begin());
  entries_.push_back(Entry{.key = key, .rec = nullptr, .seen = false, .failed = false});
  return entries_.back();
}

void StepGraph::record(Backend& be, Entry& e, const std::function<void()>& issue) {
  try {
    e.rec = be.record(issue);
    ++stats_.recorded;
  } catch (const Error& err) {
    if (mode_ == GraphMode::On) throw;
    e.failed = true;
    ++stats_.failed;
    if (!said_) std::fprintf(stderr, "train: the step is queued op by op (recording it failed: %s)\n", err.what());
    said_ = true;
  }
}

void StepGraph::run(Backend& be, const StepKey& key, const std::function<void()>& issue) {
  if (!active(be)) fail("train.graph: {} cannot record a step", be.name());
  Entry& e = entry(key);
  if (e.rec) {
    if (e.rec->replay()) {
      ++stats_.replayed;
      return;
    }
    e.rec.reset();  // stale: the backend moved memory since; recorded again below
  } else if (!e.seen || e.failed) {
    e.seen = true;
    ++stats_.unrecorded;
    issue();
    return;
  }
  record(be, e, issue);
  if (!e.rec) {  // nothing ran: the step goes op by op
    ++stats_.unrecorded;
    issue();
    return;
  }
  if (!e.rec->replay()) fail("train.graph: a step recorded just now could not be replayed");
  ++stats_.replayed;
}

}  // namespace clm

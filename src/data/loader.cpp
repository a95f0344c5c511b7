// The data loader (see loader.h and docs/DATA.md). The split's shards are one token stream; it is
// cut once, at construction, into rows of T+1 tokens that all start with BOS (a row that begins
// inside a document gets a BOS in front of its T tokens). Rows are fixed for a given T, so an epoch
// is just an order of rows: file order for validation, a seeded permutation per epoch for training.
// The endless sequence epoch 0, epoch 1, ... is dealt to ranks in blocks of B rows (block i to rank
// i mod world), so one optimizer step of `world` ranks with one micro-batch each reads exactly the
// rows that one process reads with `world` micro-batches; the position is a single row counter,
// which makes checkpoints trivial and resumption exact.
#include "data/loader.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "core/common.h"
#include "core/json_get.h"
#include "data/dataset.h"

namespace clm {

static constexpr uint64_t kInsertedBos = uint64_t(1) << 63;

struct Batch {
  std::vector<int32_t> inputs, targets;
  bool ok = false;
};

struct LoaderImpl {
  LoaderOptions opt;
  uint32_t bos = 0;
  std::vector<Shard> shards;
  std::vector<uint64_t> shard_start;  // stream offset of each shard
  uint64_t n_tokens = 0;
  std::vector<uint64_t> row_start;    // stream offset | kInsertedBos
  uint64_t consumed = 0;              // rows handed to the caller by this rank

  // Permutations by epoch (producer side only).
  std::map<uint64_t, std::vector<uint32_t>> perms;

  // Prefetch.
  std::thread worker;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Batch> queue;
  bool stop = false;
  bool running = false;
  uint64_t produced = 0;  // rows produced (the producer's cursor)
  std::exception_ptr error;
  static constexpr size_t kDepth = 2;

  uint32_t token(uint64_t pos) const {
    size_t s = size_t(std::upper_bound(shard_start.begin(), shard_start.end(), pos) - shard_start.begin()) - 1;
    return shards[s].at(pos - shard_start[s]);
  }

  void copy_tokens(uint64_t pos, size_t n, int32_t* out) const {
    size_t s = size_t(std::upper_bound(shard_start.begin(), shard_start.end(), pos) - shard_start.begin()) - 1;
    while (n > 0) {
      const Shard& sh = shards[s];
      uint64_t off = pos - shard_start[s];
      size_t take = size_t(std::min<uint64_t>(n, sh.n_tokens - off));
      // A token id at or past the vocabulary would index past the model's embedding table, so a
      // corrupt shard is refused here, where every token passes on its way to the model.
      uint32_t mx = 0;
      if (sh.width == 2) {
        const uint16_t* src = (const uint16_t*)sh.data + off;
        for (size_t i = 0; i < take; ++i) mx = std::max<uint32_t>(mx, src[i]), out[i] = int32_t(src[i]);
      } else {
        const uint32_t* src = (const uint32_t*)sh.data + off;
        for (size_t i = 0; i < take; ++i) mx = std::max(mx, src[i]), out[i] = int32_t(src[i]);
      }
      if (take > 0 && mx >= sh.vocab_size)
        fail("{} is corrupt: token id {} is not below its vocab_size {}", sh.path, mx, sh.vocab_size);
      out += take;
      n -= take;
      pos += take;
      ++s;
    }
  }

  void build_rows() {
    const uint64_t T = uint64_t(opt.T);
    uint64_t p = 0;
    while (p < n_tokens) {
      bool natural = token(p) == bos;
      uint64_t need = natural ? T + 1 : T;
      if (p + need > n_tokens) break;
      row_start.push_back(natural ? p : (p | kInsertedBos));
      p += need;
    }
  }

  const std::vector<uint32_t>& perm(uint64_t epoch) {
    auto it = perms.find(epoch);
    if (it != perms.end()) return it->second;
    while (perms.size() >= 2) perms.erase(perms.begin());
    std::vector<uint32_t> v(row_start.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = uint32_t(i);
    Rng rng(opt.seed * 0x9E3779B97F4A7C15ULL + epoch * 0xD1B54A32D192ED03ULL + 0x5851F42D4C957F2DULL);
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.next() % i]);
    return perms.emplace(epoch, std::move(v)).first->second;
  }

  // The k-th row of this rank: index into row_start, or -1 past the end (loop=false).
  int64_t row_for(uint64_t k) {
    const uint64_t R = row_start.size();
    const uint64_t B = uint64_t(opt.B);
    uint64_t j = ((k / B) * uint64_t(opt.world) + uint64_t(opt.rank)) * B + k % B;
    uint64_t epoch = j / R, i = j % R;
    if (!opt.loop && epoch > 0) return -1;
    return opt.shuffle ? int64_t(perm(epoch)[i]) : int64_t(i);
  }

  // Fill a batch starting at this rank's row k. ok=false when loop=false and no full batch is left.
  void fill(uint64_t k, Batch& b) {
    const size_t B = size_t(opt.B), T = size_t(opt.T);
    b.inputs.resize(B * T);
    b.targets.resize(B * T);
    b.ok = false;
    if (row_for(k + B - 1) < 0) return;  // rows of one batch are consecutive, so the last decides
    std::vector<int32_t> row(T + 1);
    for (size_t r = 0; r < B; ++r) {
      uint64_t st = row_start[size_t(row_for(k + r))];
      if (st & kInsertedBos) {
        row[0] = int32_t(bos);
        copy_tokens(st & ~kInsertedBos, T, row.data() + 1);
      } else {
        copy_tokens(st, T + 1, row.data());
      }
      std::memcpy(b.inputs.data() + r * T, row.data(), T * sizeof(int32_t));
      std::memcpy(b.targets.data() + r * T, row.data() + 1, T * sizeof(int32_t));
    }
    b.ok = true;
  }

  void run() {
    try {
      for (;;) {
        uint64_t k;
        {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait(lk, [&] { return stop || queue.size() < kDepth; });
          if (stop) return;
          k = produced;
        }
        Batch b;
        fill(k, b);
        std::unique_lock<std::mutex> lk(mu);
        if (stop) return;
        bool ok = b.ok;
        queue.push_back(std::move(b));
        produced += uint64_t(opt.B);
        cv.notify_all();
        if (!ok) return;  // the end of a non-looping split
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu);
      error = std::current_exception();
      cv.notify_all();
    }
  }

  void start() {
    stop = false;
    produced = consumed;
    queue.clear();
    perms.clear();
    error = nullptr;
    worker = std::thread([this] { run(); });
    running = true;
  }

  void halt() {
    if (!running) return;
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv.notify_all();
    worker.join();
    running = false;
    queue.clear();
  }

  bool next(int32_t* inputs, int32_t* targets) {
    const size_t n = size_t(opt.B) * size_t(opt.T);
    if (!opt.prefetch) {
      Batch b;
      fill(consumed, b);
      if (!b.ok) return false;
      std::memcpy(inputs, b.inputs.data(), n * sizeof(int32_t));
      std::memcpy(targets, b.targets.data(), n * sizeof(int32_t));
      consumed += uint64_t(opt.B);
      return true;
    }
    if (!running) start();
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return !queue.empty() || error; });
    if (queue.empty() && error) std::rethrow_exception(error);
    Batch& b = queue.front();
    if (!b.ok) return false;  // stays at the front: every later call also returns false
    std::memcpy(inputs, b.inputs.data(), n * sizeof(int32_t));
    std::memcpy(targets, b.targets.data(), n * sizeof(int32_t));
    queue.pop_front();
    consumed += uint64_t(opt.B);
    cv.notify_all();
    return true;
  }
};

DataLoader::DataLoader(const LoaderOptions& opt) : impl(std::make_unique<LoaderImpl>()) {
  LoaderImpl& L = *impl;
  L.opt = opt;
  if (opt.B < 1 || opt.T < 1) fail("loader: B and T must be positive (got B={}, T={})", opt.B, opt.T);
  if (opt.world < 1 || opt.rank < 0 || opt.rank >= opt.world)
    fail("loader: rank {} is not in [0, world={})", opt.rank, opt.world);
  DatasetInfo info = read_dataset_info(opt.dir);
  L.bos = info.bos_id;
  uint64_t pos = 0;
  for (const std::string& p : info.shards(opt.split)) {
    Shard s = Shard::open(p);
    if (s.vocab_size != info.vocab_size)
      fail("{} was written for vocab_size {}, but the dataset's tokenizer has {}", p, s.vocab_size,
           info.vocab_size);
    if (s.n_tokens == 0) continue;
    L.shard_start.push_back(pos);
    pos += s.n_tokens;
    L.shards.push_back(std::move(s));
  }
  L.n_tokens = pos;
  L.build_rows();
  if (L.row_start.empty())
    fail("the {} split of {} has {} tokens, fewer than one row of T+1={} tokens", opt.split, opt.dir, pos,
         opt.T + 1);
  if (L.row_start.size() > UINT32_MAX) fail("the {} split of {} has too many rows", opt.split, opt.dir);
}

DataLoader::~DataLoader() {
  if (impl) impl->halt();
}
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&& o) noexcept {
  if (this != &o) {
    if (impl) impl->halt();
    impl = std::move(o.impl);
  }
  return *this;
}

bool DataLoader::next(int32_t* inputs, int32_t* targets) { return impl->next(inputs, targets); }

uint64_t DataLoader::rows() const { return impl->row_start.size(); }
uint64_t DataLoader::tokens() const { return impl->n_tokens; }
double DataLoader::epoch() const {
  return double(impl->consumed) * impl->opt.world / double(impl->row_start.size());
}

nlohmann::json DataLoader::state() const {
  const LoaderImpl& L = *impl;
  return {{"version", 1},      {"split", L.opt.split}, {"T", L.opt.T},       {"seed", L.opt.seed},
          {"world", L.opt.world}, {"shuffle", L.opt.shuffle}, {"rows", L.row_start.size()},
          {"tokens", L.n_tokens}, {"row", L.consumed}};
}

void DataLoader::restore(const nlohmann::json& st) {
  LoaderImpl& L = *impl;
  try {
    auto check = [&](const char* key, const nlohmann::json& mine) {
      if (st.at(key) != mine)
        fail("loader state does not fit this loader: {} is {} in the checkpoint but {} now", key,
             st.at(key).dump(), mine.dump());
    };
    if (json_int<int>(st.at("version"), "loader state version") != 1)
      fail("loader state version {} is not supported", st.at("version").dump());
    check("split", L.opt.split);
    check("T", L.opt.T);
    check("seed", L.opt.seed);
    check("world", L.opt.world);
    check("shuffle", L.opt.shuffle);
    check("rows", L.row_start.size());
    check("tokens", L.n_tokens);
    uint64_t row = json_int<uint64_t>(st.at("row"), "loader state row");
    L.halt();
    L.consumed = row;
  } catch (const nlohmann::json::exception& e) {
    fail("malformed loader state: {}", e.what());
  }
}

nlohmann::json DataLoader::resplit_state(const std::vector<nlohmann::json>& states, int world, int B) {
  if (states.empty() || world < 1 || B < 1) fail("loader: re-split of {} states for {} ranks", states.size(), world);
  try {
    const uint64_t row = json_int<uint64_t>(states.front().at("row"), "loader state row");
    const int old_world = json_int<int>(states.front().at("world"), "loader state world");
    if (old_world != int(states.size()))
      fail("loader states: {} states for a job of {} ranks", states.size(), old_world);
    for (const nlohmann::json& st : states)
      if (json_int<uint64_t>(st.at("row"), "loader state row") != row)
        fail("loader states: the ranks stopped at different rows, so they cannot be dealt to {} ranks", world);
    // Rank r's k-th row is row ((k / B) * world + r) * B + k % B of the common stream, so ranks that
    // all consumed `row` rows (a multiple of B) consumed the stream's first row * old_world rows.
    const uint64_t global = row * uint64_t(old_world);
    if (row % uint64_t(B) != 0 || global % (uint64_t(B) * uint64_t(world)) != 0)
      fail("the {} rows read so far by {} rank(s) do not split into whole batches of {} rows for {} ranks", global,
           old_world, B, world);
    nlohmann::json out = states.front();
    out["world"] = world;
    out["row"] = global / uint64_t(world);
    return out;
  } catch (const nlohmann::json::exception& e) {
    fail("malformed loader state: {}", e.what());
  }
}

}  // namespace clm

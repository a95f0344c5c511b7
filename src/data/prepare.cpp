// `clocklm prepare` (see prepare.h). Two passes over the corpus: the first gathers up to
// --tokenizer-max-chars of training text for the BPE trainer (skipped with --tokenizer), the
// second streams every document through the tokenizer into shards. A reader thread decompresses
// and parses while the main thread encodes batches of documents on all cores. Everything is
// written into a hidden temp folder next to --out and swapped into place at the very end
// (FolderWrite, core/folder_swap.h).
#include "data/prepare.h"

#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <exception>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "core/common.h"
#include "core/folder_guard.h"
#include "core/folder_swap.h"
#include "core/json_parse.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "data/preset.h"
#include "core/progress.h"
#include "tok/tokenizer.h"
#include "tok/train.h"

namespace clm {

namespace fs = std::filesystem;

static constexpr int kManifestVersion = 1;

uint64_t content_hash64(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  const uint64_t k1 = 0x9E3779B97F4A7C15ULL, k2 = 0xff51afd7ed558ccdULL;
  uint64_t h = 0x2545F4914F6CDD1DULL ^ (uint64_t(n) * k1);
  auto step = [&](uint64_t w) {
    h ^= w * k2;
    h = ((h << 29) | (h >> 35)) * k1;
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    step(w);
  }
  uint64_t w = 0;
  std::memcpy(&w, p + i, n - i);
  step(w);
  h ^= h >> 33;  // murmur3 fmix64
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

bool held_out(std::string_view doc, double val_fraction) {
  return double(content_hash64(doc.data(), doc.size()) >> 11) * 0x1.0p-53 < val_fraction;
}

namespace {

// A list of corpus files plus how to read documents out of them.
struct DocSource {
  std::vector<std::string> files;
  bool preset = false;
  CorpusOptions options;
  void read(const std::function<bool(std::string_view)>& fn, CorpusStats* st) const {
    if (preset) for_each_preset_document(files, fn, st);
    else for_each_document(files, fn, st, options);
  }
};

nlohmann::json describe_files(const std::vector<std::string>& files, int threads) {
  std::vector<uint64_t> sizes(files.size()), hashes(files.size());
  std::vector<std::string> errors(files.size());
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (size_t i = 0; i < files.size(); ++i) {
    try {
      std::string data = read_file(files[i]);
      sizes[i] = data.size();
      hashes[i] = content_hash64(data.data(), data.size());
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  }
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < files.size(); ++i) {
    if (!errors[i].empty()) throw Error(errors[i]);
    out.push_back({{"path", files[i]}, {"size", sizes[i]}, {"hash", hex64(hashes[i])}});
  }
  return out;
}

// What identifies a preparation for the idempotency check: input contents (not their paths, so a
// moved corpus is still recognised), split rule, tokenizer recipe, shard size.
nlohmann::json content_of(const nlohmann::json& files) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : files) out.push_back({{"size", f["size"]}, {"hash", f["hash"]}});
  return out;
}

std::string iso_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

nlohmann::json tokenizer_options_json(const TokenizerOptions& o) {
  nlohmann::json specials = nlohmann::json::array();
  for (auto& [name, id] : o.specials) specials.push_back({name, id});
  return {{"pattern", o.pattern}, {"special", specials}, {"bos", o.bos}, {"add_bos", o.add_bos}};
}

std::string mb(double bytes) { return fmt::format("{:.1f} MB", bytes / 1e6); }

void say(const PrepareOptions& opt, const std::string& s) {
  if (!opt.quiet) std::fprintf(stderr, "prepare: %s\n", s.c_str());
}

// One split's shards being written.
struct SplitWriter {
  SplitWriter(std::string d, std::string p, uint32_t v, uint32_t b, uint64_t st)
      : dir(std::move(d)), prefix(std::move(p)), vocab_size(v), bos(b), shard_tokens(st) {}
  std::string dir, prefix;
  uint32_t vocab_size, bos;
  uint64_t shard_tokens;
  std::unique_ptr<ShardWriter> cur;
  uint64_t cur_docs = 0, cur_bytes = 0;
  nlohmann::json shards = nlohmann::json::array();
  int64_t documents = 0, bytes = 0, tokens = 0;

  void add(const std::vector<uint32_t>& ids, size_t doc_bytes) {
    uint64_t n = ids.size() + 1;
    if (cur && cur->n_tokens > 0 && cur->n_tokens + n > shard_tokens) close();
    if (!cur) {
      std::string file = fmt::format("{}_{:06d}.bin", prefix, shards.size());
      cur = std::make_unique<ShardWriter>((fs::path(dir) / file).string(), vocab_size);
    }
    cur->append(&bos, 1);
    cur->append(ids.data(), ids.size());
    cur_docs++;
    cur_bytes += doc_bytes;
    documents++;
    bytes += int64_t(doc_bytes);
    tokens += int64_t(n);
  }
  void close() {
    if (!cur) return;
    cur->finish();
    shards.push_back({{"file", fs::path(cur->path).filename().string()},
                      {"tokens", cur->n_tokens},
                      {"documents", cur_docs},
                      {"bytes", cur_bytes}});
    cur.reset();
    cur_docs = cur_bytes = 0;
  }
};

// Documents handed from the reader thread to the encoder.
struct Chunk {
  std::string text;
  std::vector<size_t> ends;
  std::vector<uint8_t> split;  // 0 train, 1 val
  int64_t input_bytes = 0;     // input consumed when this chunk was cut (progress)
  bool last = false;
};

// The options resolved: what to read, how to split it, which tokenizer to make.
struct PrepareSpec {
  const Preset* preset = nullptr;
  int threads = 1;
  bool separate_val = false;
  double val_fraction = 0;
  uint32_t vocab_size = 0;
  DocSource train_src, val_src;
};

PrepareSpec resolve_options(const PrepareOptions& opt) {
  PrepareSpec s;
  s.threads = opt.threads > 0 ? opt.threads : default_threads();
  if (opt.out.empty()) fail("prepare: --out DIR is required");
  s.preset = opt.preset.empty() ? nullptr : &find_preset(opt.preset);
  if (!s.preset && opt.inputs.empty()) fail("prepare: give --input FILE|DIR|GLOB (repeatable) or --preset NAME");
  if (s.preset && !opt.inputs.empty()) fail("prepare: --preset and --input cannot be combined");
  if (!opt.val_inputs.empty() && opt.val_fraction >= 0)
    fail("prepare: --val and --val-fraction cannot be combined");
  if (!opt.tokenizer.empty() && opt.vocab_size != 0)
    fail("prepare: --tokenizer and --vocab-size cannot be combined (the tokenizer fixes the vocabulary)");
  if (opt.shard_tokens < 1) fail("prepare: --shard-tokens must be positive");
  const TokenizerOptions& to = opt.tokenizer_options;
  if (opt.tokenizer.empty() && (!to.pattern.empty() || !to.specials.empty() || !to.bos.empty() || !to.add_bos.empty()))
    fail("prepare: --pattern, --special, --bos and --add-bos apply to a given --tokenizer");
  s.separate_val = !opt.val_inputs.empty();
  s.val_fraction = s.separate_val           ? 0.0
                   : opt.val_fraction >= 0 ? opt.val_fraction
                   : s.preset              ? s.preset->val_fraction
                                           : 0.01;
  if (!s.separate_val && !(s.val_fraction > 0 && s.val_fraction < 1))
    fail("prepare: --val-fraction must be between 0 and 1 (exclusive), got {}", s.val_fraction);
  s.vocab_size = opt.vocab_size ? opt.vocab_size : s.preset ? s.preset->vocab_size : 32768;
  if (opt.tokenizer.empty() && (s.vocab_size < 257 || s.vocab_size > (1u << 24)))
    fail("prepare: --vocab-size must be between 257 and 16777216, got {}", s.vocab_size);
  if (opt.tokenizer_max_chars < 1) fail("prepare: --tokenizer-max-chars must be positive");
  if (opt.text_column.empty()) fail("prepare: --text-column must name a column");
  if (s.preset) {
    s.train_src = {preset_files(s.preset->name), true, CorpusOptions{}};
    return s;
  }
  CorpusOptions co;
  co.txt_doc_bytes = size_t(opt.txt_doc_bytes);
  co.text_column = opt.text_column;
  co.threads = s.threads;
  s.train_src = {expand_inputs(opt.inputs), false, co};
  if (s.separate_val) s.val_src = {expand_inputs(opt.val_inputs), false, co};
  for (const auto& f : s.val_src.files)
    if (std::binary_search(s.train_src.files.begin(), s.train_src.files.end(), f))
      fail("prepare: {} is both a training and a validation input", f);
  return s;
}

// What identifies a preparation (the idempotency check compares it with an existing manifest's).
nlohmann::json preparation_key(const PrepareOptions& opt, const PrepareSpec& s, const nlohmann::json& train_files,
                               const nlohmann::json& val_files, const nlohmann::json& tok_recipe) {
  nlohmann::json key = {{"format_version", kManifestVersion},
                        {"preset", opt.preset},
                        {"train_inputs", content_of(train_files)},
                        {"val_inputs", content_of(val_files)},
                        {"val_fraction", s.separate_val ? nlohmann::json(nullptr) : nlohmann::json(s.val_fraction)},
                        {"tokenizer", tok_recipe},
                        {"shard_tokens", opt.shard_tokens},
                        {"txt_doc_bytes", opt.txt_doc_bytes}};
  if (opt.text_column != "text") key["text_column"] = opt.text_column;  // absent: the default column
  return key;
}

// The shard or tokenizer file of an existing dataset that is missing or has the wrong size, or "".
std::string damaged_file(const fs::path& out, const nlohmann::json& manifest) {
  std::error_code ec;
  const uint64_t width = shard_width_for(manifest["tokenizer"]["vocab_size"].get<uint32_t>());
  for (const char* split : {"train", "val"})
    for (const auto& sh : manifest["splits"][split]["shards"]) {
      fs::path p = out / sh["file"].get<std::string>();
      uint64_t want = kShardHeaderBytes + sh["tokens"].get<uint64_t>() * width;
      if (!fs::exists(p, ec) || fs::file_size(p, ec) != want) return p.string();
    }
  if (!fs::exists(out / "tokenizer.json", ec)) return (out / "tokenizer.json").string();
  return "";
}

// An existing --out: the manifest when it holds this very preparation intact (nothing to do),
// nothing when it may be replaced (absent, empty, or --force over another dataset), else an Error.
std::optional<nlohmann::json> existing_preparation(const fs::path& out, const PrepareOptions& opt,
                                                   const nlohmann::json& key) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return std::nullopt;
  if (!fs::is_directory(out, ec)) fail("prepare: --out {} exists and is not a folder", opt.out);
  nlohmann::json old;
  bool is_dataset = false;
  if (fs::exists(out / "manifest.json", ec)) {
    try {
      if (try_parse_json(read_file((out / "manifest.json").string()), old) && old.is_object())
        is_dataset = old.value("format", "") == "clocklm-dataset";
    } catch (const nlohmann::json::exception&) {
    }
  }
  if (is_dataset && old.contains("preparation") && old["preparation"] == key) {
    if (const std::string damage = damaged_file(out, old); !damage.empty())
      fail("prepare: {} holds this preparation but {} is missing or has the wrong size; pass --force to redo it",
           opt.out, damage);
    return old;
  }
  const bool empty = fs::is_empty(out, ec);
  if (!empty && !is_dataset)
    fail("prepare: --out {} exists and is not a prepared dataset; refusing to write into it (remove it or "
         "choose another folder)", opt.out);
  if (!empty && !opt.force) {
    std::vector<std::string> diffs;
    const nlohmann::json& op = old.contains("preparation") ? old["preparation"] : nlohmann::json::object();
    for (auto& [k, v] : key.items())
      if (!op.contains(k) || op[k] != v) diffs.push_back(k);
    fail("prepare: {} already holds a different preparation (changed: {}); pass --force to replace it", opt.out,
         fmt::join(diffs, ", "));
  }
  return std::nullopt;
}

double total_size(const nlohmann::json& files) {
  double n = 0;
  for (const auto& f : files) n += f["size"].get<double>();
  return n;
}

// Trains the BPE tokenizer on up to --tokenizer-max-chars of the training split's text; `info`
// receives what the manifest records about it.
Tokenizer train_tokenizer(const PrepareOptions& opt, const PrepareSpec& s, double train_input,
                          nlohmann::json& info) {
  const double ts = now_seconds();
  std::string arena;
  std::vector<size_t> ends;
  CorpusStats st;
  Progress gather("tokenizer text", train_input);
  s.train_src.read(
      [&](std::string_view d) {
        if (!opt.quiet) gather.update(double(st.input_bytes), mb(double(arena.size())) + " gathered");
        if (d.empty() || (!s.separate_val && held_out(d, s.val_fraction))) return true;
        size_t room = size_t(opt.tokenizer_max_chars) - arena.size();
        arena.append(d.substr(0, std::min(room, d.size())));
        ends.push_back(arena.size());
        return arena.size() < size_t(opt.tokenizer_max_chars);
      },
      &st);
  if (!opt.quiet) gather.finish(mb(double(arena.size())) + " of training text for the tokenizer");
  if (arena.empty()) fail("prepare: no training text to train the tokenizer on");
  std::vector<std::string_view> docs;
  docs.reserve(ends.size());
  size_t b = 0;
  for (size_t e : ends) {
    docs.emplace_back(arena.data() + b, e - b);
    b = e;
  }
  say(opt, fmt::format("training a {}-token BPE tokenizer on {} in {} documents", s.vocab_size,
                       mb(double(arena.size())), docs.size()));
  BpeTrainOptions bo;
  bo.vocab_size = s.vocab_size;
  bo.max_chars = opt.tokenizer_max_chars;
  bo.threads = s.threads;
  bo.verbose = !opt.quiet;
  Tokenizer tok = train_bpe(docs, bo);
  const double secs = now_seconds() - ts;
  info = {{"source", "trained"},
          {"trained_on_bytes", arena.size()},
          {"trained_on_documents", docs.size()},
          {"training_seconds", secs}};
  say(opt, fmt::format("tokenizer trained in {:.1f}s (vocab {}, hash {})", secs, tok.vocab_size(), tok.hash()));
  return tok;
}

// Chunks of documents passed from the reader thread to the encoder, at most kDepth waiting.
class ChunkQueue {
 public:
  static constexpr size_t kChunkBytes = 8 << 20, kChunkDocs = 16384, kDepth = 3;
  bool push(Chunk&& c) {  // false once stopped
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return stop_ || queue_.size() < kDepth; });
    if (stop_) return false;
    queue_.push_back(std::move(c));
    cv_.notify_all();
    return true;
  }
  Chunk pop() {  // rethrows the reader's error once the queue is drained
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !queue_.empty() || error_; });
    if (queue_.empty()) std::rethrow_exception(error_);
    Chunk c = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return c;
  }
  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lk(mu_);
    error_ = e;
    cv_.notify_all();
  }
  void stop() {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
};

// What the tokenizing pass leaves besides the shards.
struct ReadTotals {
  CorpusStats stats[2];            // per split source (train, val)
  int64_t empty_docs[2] = {0, 0};  // per split
};

// The reader thread's work: every document of both sources, split and cut into chunks.
void read_into_chunks(const PrepareSpec& s, ChunkQueue& q, ReadTotals& totals) {
  Chunk c;
  int64_t base = 0;
  auto run = [&](const DocSource& src, int fixed_split) {
    const int idx = fixed_split < 0 ? 0 : fixed_split;
    bool ok = true;
    src.read(
        [&](std::string_view d) {
          const int split = fixed_split >= 0 ? fixed_split : held_out(d, s.val_fraction) ? 1 : 0;
          if (d.empty()) {
            totals.empty_docs[split]++;
            return true;
          }
          c.text.append(d);
          c.ends.push_back(c.text.size());
          c.split.push_back(uint8_t(split));
          if (c.text.size() >= ChunkQueue::kChunkBytes || c.ends.size() >= ChunkQueue::kChunkDocs) {
            c.input_bytes = base + totals.stats[idx].input_bytes;
            ok = q.push(std::exchange(c, Chunk{}));
          }
          return ok;
        },
        &totals.stats[idx]);
    base += totals.stats[idx].input_bytes;
    return ok;
  };
  if (!run(s.train_src, s.separate_val ? 0 : -1)) return;
  if (s.separate_val && !run(s.val_src, 1)) return;
  c.input_bytes = base;
  c.last = true;
  q.push(std::move(c));
}

// Streams every document through the tokenizer into the two splits' shards: a reader thread
// decompresses and parses while this thread encodes each chunk on all cores. Returns seconds.
double tokenize_into_shards(const PrepareOptions& opt, const PrepareSpec& s, const Tokenizer& tok,
                            double total_input, SplitWriter (&writers)[2], ReadTotals& totals) {
  ChunkQueue q;
  std::thread reader([&] {
    try {
      read_into_chunks(s, q, totals);
    } catch (...) {
      q.fail(std::current_exception());
    }
  });
  Progress progress("prepare", total_input);
  double text_bytes = 0, n_tokens = 0;
  const double te = now_seconds();
  try {
    for (bool last = false; !last;) {
      const Chunk c = q.pop();
      std::vector<std::string_view> docs;
      docs.reserve(c.ends.size());
      size_t b = 0;
      for (size_t e : c.ends) {
        docs.emplace_back(c.text.data() + b, e - b);
        b = e;
      }
      const std::vector<std::vector<uint32_t>> ids = tok.encode_batch(docs);
      for (size_t i = 0; i < docs.size(); ++i) {
        writers[c.split[i]].add(ids[i], docs[i].size());
        n_tokens += double(ids[i].size() + 1);
      }
      text_bytes += double(c.text.size());
      if (!opt.quiet) {
        const double el = std::max(1e-9, now_seconds() - te);
        progress.update(double(c.input_bytes), fmt::format("{:.1f} MB/s text | {:.2f}M tok/s | {} docs",
                                                           text_bytes / el / 1e6, n_tokens / el / 1e6,
                                                           writers[0].documents + writers[1].documents));
      }
      last = c.last;
    }
  } catch (...) {
    q.stop();
    reader.join();
    throw;
  }
  reader.join();
  writers[0].close();
  writers[1].close();
  const double secs = now_seconds() - te;
  if (!opt.quiet)
    progress.finish(fmt::format("{} of text in {:.1f}s ({:.1f} MB/s, {:.2f}M tokens/s)", mb(text_bytes), secs,
                                text_bytes / secs / 1e6, n_tokens / secs / 1e6));
  return secs;
}

void check_splits(const PrepareSpec& s, const SplitWriter (&writers)[2]) {
  if (writers[0].documents == 0) fail("prepare: the training split is empty (no documents in the inputs)");
  if (writers[1].documents == 0)
    fail("prepare: the validation split is empty; {}",
         s.separate_val ? "the --val inputs hold no documents"
                        : fmt::format("none of the {} documents was held out with --val-fraction {} (a .txt file "
                                      "is one document unless --txt-doc-bytes cuts it; use a larger fraction, more "
                                      "documents, --txt-doc-bytes N, or --val FILE)",
                                      writers[0].documents, s.val_fraction));
}

nlohmann::json split_json(const SplitWriter& w, int64_t empty_docs) {
  return {{"documents", w.documents}, {"bytes", w.bytes},  {"tokens", w.tokens},
          {"shards", w.shards},       {"empty_documents", empty_docs}};
}

// Everything the manifest records about how the dataset was made.
struct ManifestParts {
  nlohmann::json key, train_files, val_files, tok_info;
  double started = 0, tokenize_seconds = 0;
};

nlohmann::json make_manifest(const PrepareOptions& opt, const PrepareSpec& s, const ManifestParts& m,
                             const SplitWriter (&writers)[2], const ReadTotals& totals) {
  nlohmann::json malformed_files = nlohmann::json::object();
  for (const auto& st : totals.stats)
    for (const auto& [f, n] : st.malformed_per_file) malformed_files[f] = n;
  return {{"format", "clocklm-dataset"},
          {"format_version", kManifestVersion},
          {"clocklm_version", CLOCKLM_VERSION},
          {"created", iso_now()},
          {"preparation", m.key},
          {"parameters",
           {{"preset", opt.preset},
            {"inputs", opt.inputs},
            {"val_inputs", opt.val_inputs},
            {"val_fraction", s.separate_val ? nlohmann::json(nullptr) : nlohmann::json(s.val_fraction)},
            {"vocab_size", opt.tokenizer.empty() ? nlohmann::json(s.vocab_size) : nlohmann::json(nullptr)},
            {"tokenizer", opt.tokenizer},
            {"tokenizer_options", tokenizer_options_json(opt.tokenizer_options)},
            {"tokenizer_max_chars", opt.tokenizer_max_chars},
            {"shard_tokens", opt.shard_tokens},
            {"txt_doc_bytes", opt.txt_doc_bytes},
            {"text_column", opt.text_column},
            {"threads", s.threads}}},
          {"inputs", {{"train", m.train_files}, {"val", m.val_files}}},
          {"tokenizer", m.tok_info},
          {"splits",
           {{"train", split_json(writers[0], totals.empty_docs[0])},
            {"val", split_json(writers[1], totals.empty_docs[1])}}},
          {"malformed_lines", totals.stats[0].malformed_lines + totals.stats[1].malformed_lines},
          {"malformed_lines_by_file", malformed_files},
          {"null_texts", totals.stats[0].null_texts + totals.stats[1].null_texts},
          {"seconds", now_seconds() - m.started},
          {"tokenize_seconds", m.tokenize_seconds}};
}

// A non-empty --out about to be replaced must not hold what this preparation reads, nor be the
// current folder (existing_preparation has already refused folders that are not datasets).
void refuse_replacing_inputs(const PrepareOptions& opt, const PrepareSpec& s, const fs::path& out) {
  std::error_code ec;
  if (!fs::exists(out, ec) || fs::is_empty(out, ec)) return;
  std::vector<std::string> inputs = s.train_src.files;
  inputs.insert(inputs.end(), s.val_src.files.begin(), s.val_src.files.end());
  inputs.push_back(opt.tokenizer);
  refuse_unsafe_target("prepare", opt.out, out, inputs);
}

void report_skipped(const PrepareOptions& opt, const ReadTotals& t) {
  const int64_t malformed = t.stats[0].malformed_lines + t.stats[1].malformed_lines;
  const int64_t null_texts = t.stats[0].null_texts + t.stats[1].null_texts;
  if (malformed > 0)
    std::fprintf(stderr, "prepare: warning: %lld malformed JSON lines were skipped (first at %s); counts per file "
                 "are in manifest.json\n", (long long)malformed,
                 (t.stats[0].first_malformed.empty() ? t.stats[1].first_malformed : t.stats[0].first_malformed).c_str());
  if (null_texts > 0)
    std::fprintf(stderr, "prepare: %lld null values of Parquet column '%s' were skipped\n", (long long)null_texts,
                 opt.text_column.c_str());
}

}  // namespace

PrepareResult prepare_dataset(const PrepareOptions& opt) {
  ManifestParts m;
  m.started = now_seconds();
  const PrepareSpec s = resolve_options(opt);

  // Identity: input contents, split rule, tokenizer recipe, shard size.
  m.train_files = describe_files(s.train_src.files, s.threads);
  m.val_files = describe_files(s.val_src.files, s.threads);
  Tokenizer tok;
  const bool given = !opt.tokenizer.empty();
  if (given) tok = Tokenizer::load(opt.tokenizer, opt.tokenizer_options);
  const nlohmann::json tok_recipe =
      given ? nlohmann::json{{"given", tok.hash()}}
            : nlohmann::json{{"train", {{"vocab_size", s.vocab_size}, {"max_chars", opt.tokenizer_max_chars}}}};
  m.key = preparation_key(opt, s, m.train_files, m.val_files, tok_recipe);

  fs::path out = fs::absolute(fs::path(opt.out)).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();
  // The lock and the temp folder are beside --out, not in it: --out is swapped in whole at the end.
  FolderWrite write(out, "dataset folder " + opt.out);
  if (std::optional<nlohmann::json> done = existing_preparation(out, opt, m.key)) {
    say(opt, fmt::format("{} is already prepared from the same inputs and parameters; nothing to do", opt.out));
    return {true, *done};
  }
  refuse_replacing_inputs(opt, s, out);
  const std::string tmp = write.temp().string();

  if (given) {
    m.tok_info = {{"source", opt.tokenizer}, {"path", fs::absolute(opt.tokenizer).lexically_normal().string()}};
    say(opt, fmt::format("tokenizer {} (vocab {}, hash {})", opt.tokenizer, tok.vocab_size(), tok.hash()));
  } else {
    tok = train_tokenizer(opt, s, total_size(m.train_files), m.tok_info);
  }
  tok.save((fs::path(tmp) / "tokenizer.json").string());
  m.tok_info.update({{"file", "tokenizer.json"},
                     {"hash", tok.hash()},
                     {"kind", tok.kind()},
                     {"vocab_size", tok.vocab_size()},
                     {"bos_id", tok.bos_id()},
                     {"bos", tok.bos_name()}});

  SplitWriter writers[2] = {{tmp, "train", tok.vocab_size(), tok.bos_id(), opt.shard_tokens},
                            {tmp, "val", tok.vocab_size(), tok.bos_id(), opt.shard_tokens}};
  ReadTotals totals;
  m.tokenize_seconds =
      tokenize_into_shards(opt, s, tok, total_size(m.train_files) + total_size(m.val_files), writers, totals);
  check_splits(s, writers);

  const nlohmann::json manifest = make_manifest(opt, s, m, writers, totals);
  atomic_write((fs::path(tmp) / "manifest.json").string(), manifest.dump(2) + "\n");
  write.commit();
  report_skipped(opt, totals);
  say(opt, fmt::format("wrote {}: train {} docs, {}, {} tokens in {} shards | val {} docs, {}, {} tokens | {:.1f}s",
                       opt.out, writers[0].documents, mb(double(writers[0].bytes)), writers[0].tokens,
                       writers[0].shards.size(), writers[1].documents, mb(double(writers[1].bytes)),
                       writers[1].tokens, now_seconds() - m.started));
  return {false, manifest};
}

}  // namespace clm

// `clocklm prepare` (see prepare.h). Two passes over the corpus: the first gathers up to
// --tokenizer-max-chars of training text for the BPE trainer (skipped with --tokenizer), the
// second streams every document through the tokenizer into shards. A reader thread decompresses
// and parses while the main thread encodes batches of documents on all cores. Everything is
// written into a hidden temp folder next to --out and renamed into place at the very end.
#include "data/prepare.h"

#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/common.h"
#include "core/file_lock.h"
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

// Removes the temp folder unless released (on success it has been renamed into place).
struct TempDir {
  std::string path;
  bool keep = false;
  ~TempDir() {
    if (!keep && !path.empty()) {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  }
};

// Left-over temp folders of prepares that were killed (their pid is gone).
void remove_stale_partials(const fs::path& parent, const std::string& name) {
  std::error_code ec;
  std::string prefix = "." + name + ".partial-";
  for (auto it = fs::directory_iterator(parent, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string f = it->path().filename().string();
    if (f.rfind(prefix, 0) != 0) continue;
    int pid = std::atoi(f.c_str() + prefix.size());
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
      std::error_code ec2;
      fs::remove_all(it->path(), ec2);
    }
  }
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

}  // namespace

PrepareResult prepare_dataset(const PrepareOptions& opt) {
  const double t0 = now_seconds();
  const int threads = opt.threads > 0 ? opt.threads : default_threads();

  // ---- options ------------------------------------------------------------------------------
  if (opt.out.empty()) fail("prepare: --out DIR is required");
  const Preset* preset = opt.preset.empty() ? nullptr : &find_preset(opt.preset);
  if (!preset && opt.inputs.empty()) fail("prepare: give --input FILE|DIR|GLOB (repeatable) or --preset NAME");
  if (preset && !opt.inputs.empty()) fail("prepare: --preset and --input cannot be combined");
  if (!opt.val_inputs.empty() && opt.val_fraction >= 0)
    fail("prepare: --val and --val-fraction cannot be combined");
  if (!opt.tokenizer.empty() && opt.vocab_size != 0)
    fail("prepare: --tokenizer and --vocab-size cannot be combined (the tokenizer fixes the vocabulary)");
  if (opt.shard_tokens < 1) fail("prepare: --shard-tokens must be positive");
  const TokenizerOptions& to = opt.tokenizer_options;
  if (opt.tokenizer.empty() && (!to.pattern.empty() || !to.specials.empty() || !to.bos.empty() || !to.add_bos.empty()))
    fail("prepare: --pattern, --special, --bos and --add-bos apply to a given --tokenizer");
  const bool separate_val = !opt.val_inputs.empty();
  const double val_fraction =
      separate_val ? 0.0 : opt.val_fraction >= 0 ? opt.val_fraction : preset ? preset->val_fraction : 0.01;
  if (!separate_val && !(val_fraction > 0 && val_fraction < 1))
    fail("prepare: --val-fraction must be between 0 and 1 (exclusive), got {}", val_fraction);
  const uint32_t vocab_size = opt.vocab_size ? opt.vocab_size : preset ? preset->vocab_size : 32768;
  if (opt.tokenizer.empty() && (vocab_size < 257 || vocab_size > (1u << 24)))
    fail("prepare: --vocab-size must be between 257 and 16777216, got {}", vocab_size);
  if (opt.tokenizer_max_chars < 1) fail("prepare: --tokenizer-max-chars must be positive");
  if (opt.text_column.empty()) fail("prepare: --text-column must name a column");

  auto say = [&](const std::string& s) {
    if (!opt.quiet) std::fprintf(stderr, "prepare: %s\n", s.c_str());
  };

  DocSource train_src, val_src;
  if (preset) {
    train_src = {preset_files(preset->name), true, CorpusOptions{}};
  } else {
    CorpusOptions co;
    co.txt_doc_bytes = size_t(opt.txt_doc_bytes);
    co.text_column = opt.text_column;
    co.threads = threads;
    train_src = {expand_inputs(opt.inputs), false, co};
    if (separate_val) val_src = {expand_inputs(opt.val_inputs), false, co};
    for (const auto& f : val_src.files)
      if (std::binary_search(train_src.files.begin(), train_src.files.end(), f))
        fail("prepare: {} is both a training and a validation input", f);
  }

  // ---- identity of this preparation -----------------------------------------------------------
  nlohmann::json train_files = describe_files(train_src.files, threads);
  nlohmann::json val_files = describe_files(val_src.files, threads);
  Tokenizer given;
  nlohmann::json tok_recipe;
  if (!opt.tokenizer.empty()) {
    given = Tokenizer::load(opt.tokenizer, opt.tokenizer_options);
    tok_recipe = {{"given", given.hash()}};
  } else {
    tok_recipe = {{"train", {{"vocab_size", vocab_size}, {"max_chars", opt.tokenizer_max_chars}}}};
  }
  nlohmann::json key = {{"format_version", kManifestVersion},
                        {"preset", opt.preset},
                        {"train_inputs", content_of(train_files)},
                        {"val_inputs", content_of(val_files)},
                        {"val_fraction", separate_val ? nlohmann::json(nullptr) : nlohmann::json(val_fraction)},
                        {"tokenizer", tok_recipe},
                        {"shard_tokens", opt.shard_tokens},
                        {"txt_doc_bytes", opt.txt_doc_bytes}};
  if (opt.text_column != "text") key["text_column"] = opt.text_column;  // absent: the default column

  // ---- an existing output folder ------------------------------------------------------------
  fs::path out = fs::absolute(fs::path(opt.out)).lexically_normal();
  if (out.filename().empty()) out = out.parent_path();
  const fs::path parent = out.parent_path();
  make_dirs(parent.string());
  // Beside the folder, not in it: the folder itself is replaced by a rename at the end.
  const FileLock out_lock((parent / ("." + out.filename().string() + ".lock")).string(),
                          "dataset folder " + opt.out);
  std::error_code ec;
  bool out_exists = fs::exists(out, ec);
  if (out_exists) {
    if (!fs::is_directory(out, ec)) fail("prepare: --out {} exists and is not a folder", opt.out);
    fs::path mpath = out / "manifest.json";
    nlohmann::json old;
    bool is_dataset = false;
    if (fs::exists(mpath, ec)) {
      try {
        old = nlohmann::json::parse(read_file(mpath.string()));
        is_dataset = old.value("format", "") == "clocklm-dataset";
      } catch (const nlohmann::json::exception&) {
      }
    }
    bool empty = fs::is_empty(out, ec);
    if (is_dataset && old.contains("preparation") && old["preparation"] == key) {
      // Same preparation: check the folder is intact, then do nothing.
      std::string damage;
      for (const char* split : {"train", "val"})
        for (const auto& sh : old["splits"][split]["shards"]) {
          fs::path p = out / sh["file"].get<std::string>();
          uint64_t want = kShardHeaderBytes + sh["tokens"].get<uint64_t>() * shard_width_for(old["tokenizer"]["vocab_size"].get<uint32_t>());
          if (!fs::exists(p, ec) || fs::file_size(p, ec) != want) damage = p.string();
        }
      if (!fs::exists(out / "tokenizer.json", ec)) damage = (out / "tokenizer.json").string();
      if (!damage.empty())
        fail("prepare: {} holds this preparation but {} is missing or has the wrong size; pass --force to redo it",
             opt.out, damage);
      say(fmt::format("{} is already prepared from the same inputs and parameters; nothing to do", opt.out));
      return {true, old};
    }
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
  }

  // ---- temp folder ----------------------------------------------------------------------------
  remove_stale_partials(parent, out.filename().string());
  TempDir tmp{(parent / ("." + out.filename().string() + ".partial-" + std::to_string(getpid()))).string()};
  fs::remove_all(tmp.path, ec);
  make_dirs(tmp.path);

  // ---- tokenizer ------------------------------------------------------------------------------
  Tokenizer tok;
  nlohmann::json tok_info;
  if (!opt.tokenizer.empty()) {
    tok = given;
    tok_info = {{"source", opt.tokenizer}, {"path", fs::absolute(opt.tokenizer).lexically_normal().string()}};
    say(fmt::format("tokenizer {} (vocab {}, hash {})", opt.tokenizer, tok.vocab_size(), tok.hash()));
  } else {
    double ts = now_seconds();
    std::string arena;
    std::vector<size_t> ends;
    CorpusStats st;
    double train_input = 0;
    for (const auto& f : train_files) train_input += f["size"].get<double>();
    Progress gather("tokenizer text", train_input);
    train_src.read(
        [&](std::string_view d) {
          if (!opt.quiet) gather.update(double(st.input_bytes), mb(double(arena.size())) + " gathered");
          if (d.empty() || (!separate_val && held_out(d, val_fraction))) return true;
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
    say(fmt::format("training a {}-token BPE tokenizer on {} in {} documents", vocab_size, mb(double(arena.size())),
                    docs.size()));
    BpeTrainOptions bo;
    bo.vocab_size = vocab_size;
    bo.max_chars = opt.tokenizer_max_chars;
    bo.threads = threads;
    bo.verbose = !opt.quiet;
    tok = train_bpe(docs, bo);
    double secs = now_seconds() - ts;
    tok_info = {{"source", "trained"},
                {"trained_on_bytes", arena.size()},
                {"trained_on_documents", docs.size()},
                {"training_seconds", secs}};
    say(fmt::format("tokenizer trained in {:.1f}s (vocab {}, hash {})", secs, tok.vocab_size(), tok.hash()));
  }
  tok.save((fs::path(tmp.path) / "tokenizer.json").string());
  tok_info["file"] = "tokenizer.json";
  tok_info["hash"] = tok.hash();
  tok_info["kind"] = tok.kind();
  tok_info["vocab_size"] = tok.vocab_size();
  tok_info["bos_id"] = tok.bos_id();
  tok_info["bos"] = tok.bos_name();

  // ---- tokenize into shards -------------------------------------------------------------------
  SplitWriter writers[2] = {{tmp.path, "train", tok.vocab_size(), tok.bos_id(), opt.shard_tokens},
                            {tmp.path, "val", tok.vocab_size(), tok.bos_id(), opt.shard_tokens}};
  CorpusStats stats[2];
  int64_t empty_docs[2] = {0, 0};
  double total_input = 0;
  for (const auto& f : train_files) total_input += f["size"].get<double>();
  for (const auto& f : val_files) total_input += f["size"].get<double>();

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Chunk> queue;
  std::exception_ptr reader_error;
  bool stop = false;
  constexpr size_t kChunkBytes = 8 << 20, kChunkDocs = 16384, kDepth = 3;

  std::thread reader([&] {
    try {
      Chunk c;
      int64_t base = 0;
      auto push = [&](bool last) {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stop || queue.size() < kDepth; });
        if (stop) return false;
        c.last = last;
        queue.push_back(std::move(c));
        c = Chunk{};
        cv.notify_all();
        return true;
      };
      auto run = [&](const DocSource& src, int fixed_split) {
        int idx = fixed_split < 0 ? 0 : fixed_split;
        bool ok = true;
        src.read(
            [&](std::string_view d) {
              int split = fixed_split >= 0 ? fixed_split : held_out(d, val_fraction) ? 1 : 0;
              if (d.empty()) {
                empty_docs[split]++;  // reader thread only; read after join
                return true;
              }
              c.text.append(d);
              c.ends.push_back(c.text.size());
              c.split.push_back(uint8_t(split));
              if (c.text.size() >= kChunkBytes || c.ends.size() >= kChunkDocs) {
                c.input_bytes = base + stats[idx].input_bytes;
                ok = push(false);
              }
              return ok;
            },
            &stats[idx]);
        base += stats[idx].input_bytes;
        return ok;
      };
      if (!run(train_src, separate_val ? 0 : -1)) return;
      if (separate_val && !run(val_src, 1)) return;
      c.input_bytes = base;
      push(true);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu);
      reader_error = std::current_exception();
      cv.notify_all();
    }
  });
  auto stop_reader = [&] {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv.notify_all();
    if (reader.joinable()) reader.join();
  };

  Progress progress("prepare", total_input);
  double text_bytes = 0, n_tokens = 0;
  const double te = now_seconds();
  try {
    for (;;) {
      Chunk c;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return !queue.empty() || reader_error; });
        if (queue.empty()) std::rethrow_exception(reader_error);
        c = std::move(queue.front());
        queue.pop_front();
        cv.notify_all();
      }
      std::vector<std::string_view> docs;
      docs.reserve(c.ends.size());
      size_t b = 0;
      for (size_t e : c.ends) {
        docs.emplace_back(c.text.data() + b, e - b);
        b = e;
      }
      std::vector<std::vector<uint32_t>> ids = tok.encode_batch(docs);
      for (size_t i = 0; i < docs.size(); ++i) {
        writers[c.split[i]].add(ids[i], docs[i].size());
        n_tokens += double(ids[i].size() + 1);
      }
      text_bytes += double(c.text.size());
      if (!opt.quiet) {
        double el = std::max(1e-9, now_seconds() - te);
        progress.update(double(c.input_bytes), fmt::format("{:.1f} MB/s text | {:.2f}M tok/s | {} docs",
                                                           text_bytes / el / 1e6, n_tokens / el / 1e6,
                                                           writers[0].documents + writers[1].documents));
      }
      if (c.last) break;
    }
  } catch (...) {
    stop_reader();
    throw;
  }
  reader.join();
  writers[0].close();
  writers[1].close();
  double tokenize_seconds = now_seconds() - te;
  if (!opt.quiet)
    progress.finish(fmt::format("{} of text in {:.1f}s ({:.1f} MB/s, {:.2f}M tokens/s)", mb(text_bytes),
                                tokenize_seconds, text_bytes / tokenize_seconds / 1e6,
                                n_tokens / tokenize_seconds / 1e6));

  if (writers[0].documents == 0) fail("prepare: the training split is empty (no documents in the inputs)");
  if (writers[1].documents == 0)
    fail("prepare: the validation split is empty; {}",
         separate_val ? "the --val inputs hold no documents"
                      : fmt::format("none of the {} documents was held out with --val-fraction {} (a .txt file "
                                    "is one document unless --txt-doc-bytes cuts it; use a larger fraction, more "
                                    "documents, --txt-doc-bytes N, or --val FILE)",
                                    writers[0].documents, val_fraction));

  // ---- manifest -----------------------------------------------------------------------------
  int64_t malformed = stats[0].malformed_lines + stats[1].malformed_lines;
  int64_t null_texts = stats[0].null_texts + stats[1].null_texts;
  auto split_json = [&](int s) {
    const SplitWriter& w = writers[s];
    nlohmann::json j = {{"documents", w.documents}, {"bytes", w.bytes},  {"tokens", w.tokens},
                        {"shards", w.shards},       {"empty_documents", empty_docs[s]}};
    return j;
  };
  nlohmann::json malformed_files = nlohmann::json::object();
  for (const auto& st : stats)
    for (const auto& [f, n] : st.malformed_per_file) malformed_files[f] = n;
  nlohmann::json manifest = {
      {"format", "clocklm-dataset"},
      {"format_version", kManifestVersion},
      {"clocklm_version", CLOCKLM_VERSION},
      {"created", iso_now()},
      {"preparation", key},
      {"parameters",
       {{"preset", opt.preset},
        {"inputs", opt.inputs},
        {"val_inputs", opt.val_inputs},
        {"val_fraction", separate_val ? nlohmann::json(nullptr) : nlohmann::json(val_fraction)},
        {"vocab_size", opt.tokenizer.empty() ? nlohmann::json(vocab_size) : nlohmann::json(nullptr)},
        {"tokenizer", opt.tokenizer},
        {"tokenizer_options", tokenizer_options_json(to)},
        {"tokenizer_max_chars", opt.tokenizer_max_chars},
        {"shard_tokens", opt.shard_tokens},
        {"txt_doc_bytes", opt.txt_doc_bytes},
        {"text_column", opt.text_column},
        {"threads", threads}}},
      {"inputs", {{"train", train_files}, {"val", val_files}}},
      {"tokenizer", tok_info},
      {"splits", {{"train", split_json(0)}, {"val", split_json(1)}}},
      {"malformed_lines", malformed},
      {"malformed_lines_by_file", malformed_files},
      {"null_texts", null_texts},
      {"seconds", now_seconds() - t0},
      {"tokenize_seconds", tokenize_seconds}};
  atomic_write((fs::path(tmp.path) / "manifest.json").string(), manifest.dump(2) + "\n");

  // ---- move into place --------------------------------------------------------------------------
  std::string old_dir;
  if (fs::exists(out, ec)) {
    old_dir = (parent / ("." + out.filename().string() + ".old-" + std::to_string(getpid()))).string();
    fs::rename(out, old_dir, ec);
    if (ec) fail("prepare: cannot move the old {} aside: {}", opt.out, ec.message());
  }
  fs::rename(tmp.path, out, ec);
  if (ec) fail("prepare: cannot rename {} to {}: {}", tmp.path, out.string(), ec.message());
  tmp.keep = true;
  if (!old_dir.empty()) fs::remove_all(old_dir, ec);

  if (malformed > 0)
    std::fprintf(stderr, "prepare: warning: %lld malformed JSON lines were skipped (first at %s); counts per file "
                 "are in manifest.json\n", (long long)malformed,
                 (stats[0].first_malformed.empty() ? stats[1].first_malformed : stats[0].first_malformed).c_str());
  if (null_texts > 0)
    std::fprintf(stderr, "prepare: %lld null values of Parquet column '%s' were skipped\n", (long long)null_texts,
                 opt.text_column.c_str());
  say(fmt::format("wrote {}: train {} docs, {}, {} tokens in {} shards | val {} docs, {}, {} tokens | {:.1f}s",
                  opt.out, writers[0].documents, mb(double(writers[0].bytes)), writers[0].tokens,
                  writers[0].shards.size(), writers[1].documents, mb(double(writers[1].bytes)), writers[1].tokens,
                  now_seconds() - t0));
  return {false, manifest};
}

}  // namespace clm

// Subcommands of the data area: `prepare` (corpus -> tokenizer + token shards + manifest),
// `data inspect` (summarise and validate a prepared folder) and `data count` (read corpus inputs as
// prepare would, and count what they hold). Logic lives in data/prepare.cpp and data/corpus.cpp.

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/common.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "cli/tokenizer_args.h"
#include "data/prepare.h"
#include "data/preset.h"

namespace clm {

static void inspect(const std::string& dir, bool verify) {
  DatasetInfo info = read_dataset_info(dir);
  const auto& m = info.manifest;
  std::printf("dataset %s (clocklm %s, created %s)\n", dir.c_str(), m.value("clocklm_version", "?").c_str(),
              m.value("created", "?").c_str());
  std::printf("tokenizer: vocab %u, bos %u, hash %s\n", info.vocab_size, info.bos_id, info.tokenizer_hash.c_str());
  for (const char* split : {"train", "val"}) {
    const auto& s = m["splits"][split];
    uint64_t tokens = 0, bos = 0, bad = 0;
    for (const std::string& p : info.shards(split)) {
      Shard sh = Shard::open(p);
      if (sh.vocab_size != info.vocab_size)
        fail("{} was written for vocab_size {}, the dataset's is {}", p, sh.vocab_size, info.vocab_size);
      tokens += sh.size();
      if (verify) {
        if (sh.size() > 0 && sh.at(0) != info.bos_id) fail("{} does not start with BOS", p);
        for (uint64_t i = 0; i < sh.size(); ++i) {
          uint32_t t = sh.at(i);
          bos += t == info.bos_id;
          bad += t >= info.vocab_size;
        }
      }
    }
    if (tokens != s.value("tokens", uint64_t(0)))
      fail("{} split: shards hold {} tokens, manifest says {}", split, tokens, s.value("tokens", uint64_t(0)));
    if (verify && bos != s.value("documents", uint64_t(0)))
      fail("{} split: shards hold {} BOS tokens, manifest says {} documents", split, bos, s.value("documents", uint64_t(0)));
    if (verify && bad) fail("{} split: {} token ids are outside the vocabulary", split, bad);
    std::printf("%-5s: %zu shards, %llu documents, %.1f MB of text, %llu tokens (%.2f bytes/token)\n", split,
                info.shards(split).size(), (unsigned long long)s.value("documents", uint64_t(0)),
                s.value("bytes", 0.0) / 1e6, (unsigned long long)tokens,
                tokens ? s.value("bytes", 0.0) / double(tokens - s.value("documents", uint64_t(0))) : 0.0);
  }
  std::printf("malformed JSON lines: %lld\n", (long long)m.value("malformed_lines", int64_t(0)));
  std::printf(verify ? "verified: headers, sizes, token ids and document counts match the manifest\n"
                     : "headers and sizes match the manifest (--verify also checks every token)\n");
}

// Reads every document of the inputs (as prepare's reader does) and prints what was read with an
// order-sensitive checksum of the documents, so that two encodings of one corpus can be compared.
static void count_documents(const std::vector<std::string>& inputs, const std::string& column, int threads) {
  const double t0 = now_seconds();
  CorpusOptions o;
  o.text_column = column;
  o.threads = threads;
  CorpusStats st;
  uint64_t sum = 0;
  int64_t empty = 0;
  for_each_document(
      expand_inputs(inputs),
      [&](std::string_view d) {
        sum = (sum ^ content_hash64(d.data(), d.size())) * 0x100000001B3ULL;
        empty += d.empty();
        return true;
      },
      &st, o);
  const double secs = now_seconds() - t0;
  std::printf("%lld files, %lld documents (%lld empty), %.1f MB of text, %lld null texts, %lld malformed JSON lines, "
              "checksum %s\n%.2f s, %.1f MB/s of text\n",
              (long long)st.files, (long long)st.documents, (long long)empty, double(st.bytes) / 1e6,
              (long long)st.null_texts, (long long)st.malformed_lines, hex64(sum).c_str(), secs,
              double(st.bytes) / 1e6 / std::max(secs, 1e-9));
}

void register_data_commands(CLI::App& app) {
  auto opt = std::make_shared<PrepareOptions>();
  std::string preset_help = "build the corpus from a built-in preset of Debian-packaged text:";
  for (const Preset& p : presets()) preset_help += " " + p.name + " (" + p.description + ")";
  CLI::App* prep = app.add_subcommand(
      "prepare", "Tokenize a corpus into a dataset folder: tokenizer.json, train/val shards, manifest.json");
  prep->add_option("--input,-i", opt->inputs, "training text: .txt/.jsonl/.jsonl.zst/.jsonl.gz/.parquet files, folders or globs (repeatable)");
  prep->add_option("--val", opt->val_inputs, "separate validation text (files, folders, globs; repeatable)");
  prep->add_option("--val-fraction", opt->val_fraction,
                   "hold out this fraction of documents for validation, chosen by a hash of their content (default 0.01; presets set their own)");
  prep->add_option("--vocab-size", opt->vocab_size, "train a BPE tokenizer with this many tokens (default 32768; presets set their own)");
  prep->add_option("--tokenizer", opt->tokenizer,
                   "use this tokenizer: clocklm or Hugging Face tokenizer.json, .tiktoken, tokenizer.pkl, or a folder "
                   "holding one (or GPT-2's encoder.json + vocab.bpe)");
  auto tok_args = std::make_shared<TokenizerArgs>();
  add_tokenizer_args(prep, *tok_args);
  prep->add_option("--tokenizer-max-chars", opt->tokenizer_max_chars, "train the tokenizer on at most this many bytes of training text")
      ->capture_default_str();
  prep->add_option("--out,-o", opt->out, "output folder")->required();
  prep->add_option("--shard-tokens", opt->shard_tokens, "tokens per shard (a shard never splits a document)")->capture_default_str();
  prep->add_option("--txt-doc-bytes", opt->txt_doc_bytes,
                   "cut .txt inputs at blank lines into documents of at least this many bytes (default 0: a .txt file is one document)");
  prep->add_option("--text-column", opt->text_column, "the column of .parquet inputs that holds the text (a top-level string column)")
      ->capture_default_str();
  prep->add_flag("--force", opt->force, "replace a different preparation already in --out");
  prep->add_option("--preset", opt->preset, preset_help);
  prep->add_option("--threads", opt->threads, "worker threads (default: all cores, or CLOCKLM_THREADS)");
  prep->add_flag("--quiet,-q", opt->quiet, "no progress output");
  prep->callback([opt, tok_args] {
    opt->tokenizer_options = tok_args->options();
    if (opt->threads > 0) {
      setenv("CLOCKLM_THREADS", std::to_string(opt->threads).c_str(), 1);
      cpu_backend().set_threads(opt->threads);
    }
    prepare_dataset(*opt);
  });

  CLI::App* data = app.add_subcommand("data", "Inspect prepared datasets");
  data->require_subcommand(1);
  auto dir = std::make_shared<std::string>();
  auto verify = std::make_shared<bool>(false);
  CLI::App* insp = data->add_subcommand("inspect", "Summarise a prepared dataset folder and check its shards against the manifest");
  insp->add_option("dir", *dir, "dataset folder")->required();
  insp->add_flag("--verify", *verify, "also read every token (ids in range, one BOS per document)");
  insp->callback([dir, verify] { inspect(*dir, *verify); });

  auto inputs = std::make_shared<std::vector<std::string>>();
  auto column = std::make_shared<std::string>("text");
  auto threads = std::make_shared<int>(0);
  CLI::App* count = data->add_subcommand(
      "count", "Read corpus inputs as prepare does and count their documents, bytes, null texts and malformed lines");
  count->add_option("--input,-i", *inputs, "files, folders or globs (repeatable)")->required();
  count->add_option("--text-column", *column, "the column of .parquet inputs that holds the text")->capture_default_str();
  count->add_option("--threads", *threads, "Parquet row groups decoded at once (default: all cores)");
  count->callback([inputs, column, threads] { count_documents(*inputs, *column, *threads); });
}

}  // namespace clm

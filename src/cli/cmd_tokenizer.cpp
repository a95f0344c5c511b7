// `clocklm tokenizer train|encode|decode|info|export`: train a byte-level BPE on text files, turn
// text on stdin into space-separated ids on stdout and back, describe a tokenizer, and write one
// in clocklm's or Hugging Face's format.
#include <algorithm>
#include <cctype>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/common.h"
#include "cli/tokenizer_args.h"
#include "data/corpus.h"
#include "tok/hf_json.h"
#include "tok/tokenizer.h"
#include "tok/train.h"

namespace clm {

namespace fs = std::filesystem;

// `tokenizer export` writes tokenizer.json (and tokenizer_config.json) into --out, replacing files
// of those names; it refuses a folder where they belong to something else: a prepared dataset, a
// run, or the tokenizer being read.
static void refuse_foreign_tokenizer_folder(const std::string& out, const std::string& input) {
  const fs::path o(out);
  std::error_code ec;
  if (!fs::is_directory(o, ec)) return;
  const char* kind = fs::exists(o / "manifest.json", ec) ? "a dataset folder"
                     : fs::exists(o / "run.json", ec)    ? "a run folder"
                                                          : nullptr;
  if (kind)
    fail("tokenizer export: --out {} is {}; its tokenizer.json is not this command's to replace (choose another "
         "folder)", out, kind);
  for (const fs::path& f : {o, o / "tokenizer.json", o / "tokenizer_config.json"})
    if (fs::exists(f, ec) && fs::equivalent(f, input, ec))
      fail("tokenizer export: --out {} holds {}, the tokenizer being read; choose another folder", out, input);
}

// Training documents from files, folders or globs (the shared corpus reader), up to max_chars bytes.
static void read_training_text(const std::vector<std::string>& inputs, int64_t max_chars,
                               const std::string& text_column, std::vector<std::string>& docs, int64_t& bytes) {
  std::vector<std::string> files = expand_inputs(inputs);
  CorpusOptions opt;
  opt.text_column = text_column;
  CorpusStats stats;
  bytes = 0;
  for_each_document(
      files,
      [&](std::string_view doc) {
        if (bytes >= max_chars) return false;
        bytes += int64_t(doc.size());
        docs.emplace_back(doc);
        return bytes < max_chars;
      },
      &stats, opt);
  if (stats.malformed_lines > 0)
    fmt::print(stderr, "tokenizer: skipped {} malformed JSON lines (first at {})\n", stats.malformed_lines,
               stats.first_malformed);
}

static std::string read_stdin() {
  std::string s;
  struct stat st;
  if (fstat(0, &st) == 0 && S_ISREG(st.st_mode)) s.reserve(size_t(st.st_size));  // a redirected file
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) s.append(buf, n);
  if (std::ferror(stdin)) fail("error reading stdin");
  return s;
}

static void write_stdout(std::string_view s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0)
    fail("error writing stdout");
}

void register_tokenizer_commands(CLI::App& app) {
  auto* tok = app.add_subcommand("tokenizer", "Train, apply, inspect and convert byte-level BPE tokenizers");
  const char* tok_help =
      "Tokenizer: clocklm or Hugging Face tokenizer.json, .tiktoken, tokenizer.pkl, or a folder holding one (or GPT-2's "
      "encoder.json + vocab.bpe)";
  tok->require_subcommand(1);

  // train
  struct TrainArgs {
    std::vector<std::string> inputs;
    uint32_t vocab_size = 32768;
    int64_t max_chars = 2'000'000'000;
    std::string out;
    std::string text_column = "text";
    int threads = 0;
  };
  auto ta = std::make_shared<TrainArgs>();
  auto* train = tok->add_subcommand("train", "Learn a byte-level BPE (GPT-4-style pre-split) from text");
  train->add_option("--input", ta->inputs, "Files, folders or globs of .txt, .jsonl, .jsonl.zst, .jsonl.gz, .parquet")
      ->required();
  train->add_option("--text-column", ta->text_column, "The column of .parquet inputs that holds the text")
      ->capture_default_str();
  train->add_option("--vocab-size", ta->vocab_size, "Vocabulary size including 8 special tokens")
      ->capture_default_str();
  train->add_option("--max-chars", ta->max_chars, "Use at most this many bytes of training text")
      ->capture_default_str();
  train->add_option("--out", ta->out, "Output tokenizer file (or folder: writes tokenizer.json in it)")->required();
  train->add_option("--threads", ta->threads, "Worker threads (default: all cores)");
  train->callback([ta] {
    double t0 = now_seconds();
    std::vector<std::string> docs;
    int64_t bytes = 0;
    read_training_text(ta->inputs, ta->max_chars, ta->text_column, docs, bytes);
    double t1 = now_seconds();
    std::vector<std::string_view> views(docs.begin(), docs.end());
    BpeTrainOptions opt;
    opt.vocab_size = ta->vocab_size;
    opt.max_chars = ta->max_chars;
    opt.threads = ta->threads;
    opt.verbose = true;
    Tokenizer t = train_bpe(views, opt);
    double t2 = now_seconds();
    std::string out = ta->out;
    std::error_code ec;
    if (!out.empty() && (out.back() == '/' || fs::is_directory(out, ec))) {
      make_dirs(out);
      out = (fs::path(out) / "tokenizer.json").string();
    }
    t.save(out);
    fmt::print(stderr, "tokenizer: read {} documents ({} bytes) in {:.2f}s, trained in {:.2f}s\n", docs.size(),
               bytes, t1 - t0, t2 - t1);
    fmt::print("wrote {} (vocab size {}, bos {}, hash {})\n", out, t.vocab_size(), t.bos_id(), t.hash());
  });

  // encode
  auto enc_path = std::make_shared<std::string>();
  auto enc_args = std::make_shared<TokenizerArgs>();
  auto* encode = tok->add_subcommand("encode", "Text on stdin -> space-separated token ids on stdout");
  encode->add_option("--tokenizer", *enc_path, tok_help)->required();
  add_tokenizer_args(encode, *enc_args);
  encode->callback([enc_path, enc_args] {
    Tokenizer t = Tokenizer::load(*enc_path, enc_args->options());
    std::string text = read_stdin();
    std::vector<uint32_t> ids = t.encode(text);
    std::string out;
    out.reserve(ids.size() * 6 + 1);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ' ';
      fmt::format_int f(ids[i]);
      out.append(f.data(), f.size());
    }
    out += '\n';
    write_stdout(out);
  });

  // decode
  auto dec_path = std::make_shared<std::string>();
  auto dec_args = std::make_shared<TokenizerArgs>();
  auto* decode = tok->add_subcommand("decode", "Space-separated token ids on stdin -> text on stdout");
  decode->add_option("--tokenizer", *dec_path, tok_help)->required();
  add_tokenizer_args(decode, *dec_args);
  decode->callback([dec_path, dec_args] {
    Tokenizer t = Tokenizer::load(*dec_path, dec_args->options());
    std::string text = read_stdin();
    std::vector<uint32_t> ids;
    size_t i = 0, n = text.size();
    while (i < n) {
      while (i < n && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
      if (i >= n) break;
      size_t j = i;
      while (j < n && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
      std::string_view tokstr(text.data() + i, j - i);
      uint64_t v = 0;
      for (char ch : tokstr) {
        if (ch < '0' || ch > '9' || v > 0xFFFFFFFFull) fail("malformed token id '{}' on stdin", tokstr.substr(0, 40));
        v = v * 10 + uint64_t(ch - '0');
      }
      if (v >= t.vocab_size()) fail("token id {} out of range (vocab size {})", tokstr, t.vocab_size());
      ids.push_back(uint32_t(v));
      i = j;
    }
    write_stdout(t.decode(ids));
  });

  // info
  auto info_path = std::make_shared<std::string>();
  auto info_args = std::make_shared<TokenizerArgs>();
  auto* info = tok->add_subcommand("info", "Describe a tokenizer (kind, vocab size, BOS, special tokens, hash)");
  info->add_option("--tokenizer", *info_path, tok_help)->required();
  add_tokenizer_args(info, *info_args);
  info->callback([info_path, info_args] {
    Tokenizer t = Tokenizer::load(*info_path, info_args->options());
    fmt::print("kind {}\nvocab_size {}\nbos_id {} {}\nspecial_tokens {}\nhash {}\n", t.kind(), t.vocab_size(),
               t.bos_id(), t.bos_name(), t.special_tokens().size(), t.hash());
  });

  // export
  struct ExportArgs {
    std::string path, format = "hf", out;
    TokenizerArgs load;
  };
  auto ea = std::make_shared<ExportArgs>();
  auto* exp = tok->add_subcommand("export", "Write a tokenizer as Hugging Face tokenizer.json (+ tokenizer_config.json) "
                                            "or clocklm's tokenizer.json");
  exp->add_option("--tokenizer", ea->path, tok_help)->required();
  exp->add_option("--format", ea->format, "hf or clocklm")->capture_default_str();
  exp->add_option("--out", ea->out, "Output folder")->required();
  add_tokenizer_args(exp, ea->load);
  exp->callback([ea] {
    if (ea->format != "hf" && ea->format != "clocklm") fail("tokenizer export: --format must be hf or clocklm");
    Tokenizer t = Tokenizer::load(ea->path, ea->load.options());
    refuse_foreign_tokenizer_folder(ea->out, ea->path);
    if (ea->format == "hf") {
      write_hf_tokenizer(t, ea->out);
    } else {
      make_dirs(ea->out);
      t.save((fs::path(ea->out) / "tokenizer.json").string());
    }
    fmt::print("wrote {} tokenizer.json to {} (vocab size {}, bos {} {})\n", ea->format, ea->out, t.vocab_size(),
               t.bos_id(), t.bos_name());
  });
}

}  // namespace clm

// Corpus readers: documents from files, folders or globs of .txt, .jsonl (field "text"),
// .jsonl.zst, .jsonl.gz and .parquet (one string column, data/parquet.h). A .txt file is one
// document. Malformed JSON lines and null Parquet texts are counted.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace clm {

struct CorpusStats {
  int64_t files = 0, documents = 0, bytes = 0, malformed_lines = 0;
  int64_t null_texts = 0;  // null (missing) values of a Parquet text column, skipped
  std::string first_malformed;                       // "file:line" of the first malformed line
  std::map<std::string, int64_t> malformed_per_file;  // only files with malformed lines
  int64_t input_bytes = 0;  // bytes of the files read so far, as stored (compressed), for progress
};

// How files become documents beyond the defaults.
struct CorpusOptions {
  // > 0: cut .txt files at blank lines into documents of at least this many bytes (the pieces
  // concatenate back to the file exactly); 0: a .txt file is one document.
  size_t txt_doc_bytes = 0;
  // The column of .parquet files that holds the documents (a top-level string column).
  std::string text_column = "text";
  // Row groups of .parquet files decoded at once, ahead of the caller; 0: default_threads().
  int threads = 0;
};

// Expand files/folders/globs into a sorted list of input files; throws Error if one names nothing.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);
// Call fn(doc) for each document in order; fn returns false to stop early.
void for_each_document(const std::vector<std::string>& files,
                       const std::function<bool(std::string_view doc)>& fn, CorpusStats* stats = nullptr);
void for_each_document(const std::vector<std::string>& files,
                       const std::function<bool(std::string_view doc)>& fn, CorpusStats* stats,
                       const CorpusOptions& opt);

// Cut text after blank lines ("\n\n") into pieces of at least `min_bytes` (the last may be shorter);
// the pieces concatenate to `text`.
std::vector<std::string_view> cut_at_blank_lines(std::string_view text, size_t min_bytes);


// What a corpus file holds, judged by its name: JSON lines, Parquet or one text document, and how
// it is compressed (Parquet compresses inside the file: `none`). `unsupported` for any other name.
enum class Compression { none, zstd, gzip, unsupported };
struct CorpusFileKind {
  bool jsonl = false;
  Compression compression = Compression::unsupported;
  bool parquet = false;
};
CorpusFileKind corpus_file_kind(std::string_view path);

// Parse one JSON line: `ok` puts the "text" string (unescaped) into `text`; `blank` for an empty or
// whitespace-only line; `malformed` for invalid JSON, a non-object, or a missing/non-string "text".
enum class JsonLineResult { ok, blank, malformed };
JsonLineResult parse_jsonl_text(std::string_view line, std::string& text);

// Read a whole file, decompressing it when its name ends in .gz or .zst. Throws Error naming it.
std::string read_corpus_file(const std::string& path, int64_t* input_bytes = nullptr);

}  // namespace clm

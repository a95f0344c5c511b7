// Limits on tokenizer files, far above any real tokenizer, that bound the memory and time of
// loading a hostile one (docs/TOKENIZER.md, "Limits"). A file beyond them is refused in one line.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace clm {

// Bytes of one tokenizer file (each of GPT-2's two files). tiktoken's o200k_base is 3.6 MB, the
// largest byte-level Hugging Face tokenizer.json files about 15 MB. A JSON file is parsed whole,
// at about 23 bytes of memory per byte of text, so this also keeps that under 1 GiB.
inline constexpr uint64_t kMaxTokenizerFileBytes = uint64_t(32) << 20;
// Bytes of one token that a file spells out (tiktoken ranks, pickled ranks, Hugging Face and GPT-2
// vocabularies, clocklm's token list). Real vocabularies hold tokens of at most a few hundred bytes.
inline constexpr size_t kMaxTokenBytes = size_t(1) << 16;
// Merges that tiktoken ranks may turn into: every cut of a token into two tokens is one, a few per
// token in real encodings.
inline constexpr size_t kMaxTiktokenMerges = size_t(1) << 22;
// Values pushed, marks and memo entries of a pickled Encoding; a real one needs about three per token.
inline constexpr size_t kMaxPickleObjects = size_t(1) << 22;

// Refuses a tokenizer file (or its text) of `size` bytes over kMaxTokenizerFileBytes, naming `what`.
void check_tokenizer_size(uint64_t size, const std::string& what);
// Refuses a token of `size` bytes over kMaxTokenBytes; `where` says which token, e.g. "line 7".
void check_token_size(size_t size, const std::string& what, const std::string& where);
// Reads a tokenizer file after checking its size, so a huge file is refused before it is read.
std::string read_tokenizer_file(const std::string& path);

}  // namespace clm

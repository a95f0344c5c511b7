// Corpus readers (issue 3): documents from files, folders or globs of .txt, .jsonl (field "text"),
// .jsonl.zst and .jsonl.gz. A .txt file is one document. Malformed JSON lines are counted.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace clm {

struct CorpusStats {
  int64_t files = 0, documents = 0, bytes = 0, malformed_lines = 0;
};

// Expand files/folders/globs into a sorted list of input files; throws Error if one names nothing.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);
// Call fn(doc) for each document in order; fn returns false to stop early.
void for_each_document(const std::vector<std::string>& files,
                       const std::function<bool(std::string_view doc)>& fn, CorpusStats* stats = nullptr);

}  // namespace clm

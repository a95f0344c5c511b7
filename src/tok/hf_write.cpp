// Writing any clocklm tokenizer as a Hugging Face tokenizer.json (+ tokenizer_config.json): a BPE
// model spelled in GPT-2's byte-level alphabet, the tokenizer's own pre-split regex as a Split
// followed by ByteLevel without a regex of its own, its special tokens as added tokens. The text
// is built directly (vocabularies of 10^5 entries are too slow for an insertion-ordered JSON map).
#include <filesystem>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/common.h"
#include "tok/bpe.h"
#include "tok/byte_level.h"
#include "tok/hf_json.h"

namespace clm {

namespace {

std::string json_quoted(const std::string& s) { return nlohmann::json(s).dump(); }

// How each id is spelled in tokenizer.json: special tokens by name, others in the byte-level
// alphabet. Refuses two ids with one spelling (a JSON object cannot hold both).
std::vector<std::string> spellings(const TokenizerImpl& t) {
  const ByteLevel& bl = byte_level();
  std::vector<std::string> out(t.vocab.size());
  std::unordered_map<std::string, uint32_t> seen;
  seen.reserve(out.size());
  for (uint32_t id = 0; id < out.size(); ++id) {
    out[id] = t.special[id] ? t.vocab[id] : bl.encode(t.vocab[id]);
    auto [it, fresh] = seen.emplace(out[id], id);
    if (!fresh)
      fail("tokenizer {} cannot be written as tokenizer.json: ids {} and {} are both {}", t.hash, it->second, id,
           json_quoted(out[id]));
  }
  return out;
}

}  // namespace

std::string hf_tokenizer_json(const Tokenizer& tok) {
  if (!tok.impl) fail("tokenizer used before it was loaded");
  const TokenizerImpl& t = *tok.impl;
  std::vector<std::string> sp = spellings(t);
  std::string s = "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [";
  std::vector<std::pair<std::string, uint32_t>> specials = t.specials;
  std::sort(specials.begin(), specials.end(), [](auto& a, auto& b) { return a.second < b.second; });
  for (size_t i = 0; i < specials.size(); ++i)
    s += fmt::format("{}\n    {{\"id\": {}, \"content\": {}, \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                     "\"normalized\": false, \"special\": true}}",
                     i ? "," : "", specials[i].second, json_quoted(specials[i].first));
  s += "\n  ],\n  \"normalizer\": null,\n";
  s += "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n";
  s += fmt::format("    {{\"type\": \"Split\", \"pattern\": {{\"Regex\": {}}}, \"behavior\": \"Isolated\", \"invert\": false}},\n",
                   json_quoted(t.pattern));
  s += "    {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}\n  ]},\n";
  s += "  \"post_processor\": null,\n";
  s += "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n";
  s += fmt::format("  \"model\": {{\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
                   "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n"
                   "    \"byte_fallback\": false,\n    \"ignore_merges\": {},\n    \"vocab\": {{",
                   t.ignore_merges ? "true" : "false");
  for (uint32_t id = 0; id < sp.size(); ++id) s += fmt::format("{}\n      {}: {}", id ? "," : "", json_quoted(sp[id]), id);
  s += "\n    },\n    \"merges\": [";
  // Hugging Face ranks a merge by its place in this list, which is clocklm's rank order.
  for (size_t r = 0; r < t.merges.size(); ++r)
    s += fmt::format("{}\n      [{}, {}]", r ? "," : "", json_quoted(sp[t.merges[r][0]]), json_quoted(sp[t.merges[r][1]]));
  s += "\n    ]\n  }\n}\n";
  return s;
}

std::string hf_tokenizer_config_json(const Tokenizer& tok) {
  std::string bos = json_quoted(tok.bos_name());
  return fmt::format("{{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"bos_token\": {},\n  \"eos_token\": {},\n"
                     "  \"add_bos_token\": false,\n  \"add_eos_token\": false,\n  \"clean_up_tokenization_spaces\": false\n}}\n",
                     bos, bos);
}

void write_hf_tokenizer(const Tokenizer& t, const std::string& dir) {
  std::string json = hf_tokenizer_json(t), config = hf_tokenizer_config_json(t);
  make_dirs(dir);
  atomic_write((std::filesystem::path(dir) / "tokenizer.json").string(), json);
  atomic_write((std::filesystem::path(dir) / "tokenizer_config.json").string(), config);
}

}  // namespace clm

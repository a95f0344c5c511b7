// Reading a Hugging Face tokenizer.json into clocklm's BPE engine: the BPE model with GPT-2's
// byte-level alphabet, pre-split by ByteLevel's own regex or by one Split regex followed by
// ByteLevel. Every component or option that would make Hugging Face encode differently from
// what is read here is refused in one line naming it (docs/TOKENIZER.md lists them).
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/common.h"
#include "core/json_get.h"
#include "core/json_parse.h"
#include "tok/bpe.h"
#include "tok/byte_level.h"
#include "tok/hf_json.h"
#include "tok/file_limits.h"

namespace clm {

namespace {

using json = nlohmann::json;

// ByteLevel with use_regex false and no Split before it: the whole text is one piece.
constexpr const char* kWholeText = R"([\s\S]+)";

// A regex matching the literal text s (Split's {"String": ...} pattern).
std::string literal_regex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::strchr("\\^$.|?*+()[]{}", c)) out += '\\';
    out += c;
  }
  return out;
}

struct HfReader {
  const json& j;
  const std::string& what;

  std::string type_of(const json& v, const char* component) const {
    if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
      fail("{}: {} has no \"type\"", what, component);
    return v["type"].get<std::string>();
  }
  static bool is_off(const json& v) {
    return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_string() && v.get<std::string>().empty()) ||
           (v.is_number() && v.get<double>() == 0);
  }
  // obj[key] must be absent, null, false, 0 or "".
  void require_off(const json& obj, const char* key, const char* component) const {
    if (obj.contains(key) && !is_off(obj[key]))
      fail("{}: {} option {} = {} is not supported (it changes the encoding)", what, component, key,
           json_text(obj[key]));
  }

  void check_top() const {
    for (const char* k : {"truncation", "padding"})
      if (j.contains(k) && !j[k].is_null())
        fail("{}: {} is set; clocklm encodes whole texts (set it to null)", what, k);
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      const json& n = j["normalizer"];
      std::string t = type_of(n, "the normalizer");
      if (!(t == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array() && n["normalizers"].empty()))
        fail("{}: normalizer {} is not supported (only none)", what, t);
    }
    if (j.contains("decoder") && !j["decoder"].is_null()) {
      std::string t = type_of(j["decoder"], "the decoder");
      if (t != "ByteLevel") fail("{}: decoder {} is not supported (only ByteLevel)", what, t);
    }
  }

  // ByteLevel's options; returns use_regex.
  bool byte_level(const json& v) const {
    require_off(v, "add_prefix_space", "ByteLevel");  // it would add a byte the text does not have
    if (v.contains("use_regex") && !v["use_regex"].is_boolean()) fail("{}: ByteLevel use_regex must be true or false", what);
    return v.value("use_regex", true);
  }

  std::string split_pattern(const json& v) const {
    std::string behavior = v.contains("behavior") && v["behavior"].is_string() ? v["behavior"].get<std::string>() : "";
    if (behavior != "Isolated") fail("{}: Split behavior {} is not supported (only Isolated)", what, behavior.empty() ? "(none)" : behavior);
    if (!v.contains("invert") || !v["invert"].is_boolean() || v["invert"].get<bool>())
      fail("{}: Split invert must be false", what);
    const json& p = v.contains("pattern") ? v["pattern"] : json();
    if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) return p["Regex"].get<std::string>();
    if (p.is_object() && p.contains("String") && p["String"].is_string()) {
      std::string s = p["String"].get<std::string>();
      if (s.empty()) fail("{}: Split splits on an empty string", what);
      return literal_regex(s);
    }
    fail("{}: Split pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}", what);
  }

  // The pre-split regex the pre-tokenizer amounts to.
  std::string pattern() const {
    if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].is_null())
      fail("{}: has no pre-tokenizer; a byte-level BPE needs ByteLevel", what);
    const json& pt = j["pre_tokenizer"];
    std::string t = type_of(pt, "the pre-tokenizer");
    if (t == "ByteLevel") return byte_level(pt) ? kGpt2Pattern : kWholeText;
    if (t != "Sequence") fail("{}: pre-tokenizer {} is not supported (only ByteLevel, or Split then ByteLevel)", what, t);
    const json& list = pt.contains("pretokenizers") ? pt["pretokenizers"] : json();
    if (!list.is_array()) fail("{}: pre-tokenizer Sequence has no pretokenizers list", what);
    std::vector<std::string> types;
    for (auto& e : list) types.push_back(type_of(e, "a pre-tokenizer"));
    if (types.size() == 1 && types[0] == "ByteLevel") return byte_level(list[0]) ? kGpt2Pattern : kWholeText;
    if (types.size() == 2 && types[0] == "Split" && types[1] == "ByteLevel") {
      std::string p = split_pattern(list[0]);
      if (byte_level(list[1]))
        fail("{}: ByteLevel with use_regex true after a Split (two regex stages) is not supported", what);
      return p;
    }
    fail("{}: pre-tokenizer Sequence [{}] is not supported (only ByteLevel, or Split then ByteLevel)", what,
         fmt::join(types, ", "));
  }

  // The special token the post-processor puts before every text ("" if none); refuses one that
  // adds anything else.
  std::string post_processor(const json& v) const {
    if (v.is_null()) return "";
    std::string t = type_of(v, "the post-processor");
    if (t == "ByteLevel") return "";
    if (t == "Sequence") {
      std::string first;
      const json& list = v.contains("processors") ? v["processors"] : json();
      if (!list.is_array()) fail("{}: post-processor Sequence has no processors list", what);
      for (auto& e : list) {
        std::string p = post_processor(e);
        if (!p.empty()) first = p;
      }
      return first;
    }
    if (t != "TemplateProcessing")
      fail("{}: post-processor {} is not supported (only ByteLevel and TemplateProcessing)", what, t);
    const json& single = v.contains("single") ? v["single"] : json();
    if (!single.is_array()) fail("{}: TemplateProcessing has no single template", what);
    std::string lead;
    bool text = false;
    for (auto& e : single) {
      if (e.is_object() && e.contains("Sequence") && !text) {
        text = true;
      } else if (e.is_object() && e.contains("SpecialToken") && !text && lead.empty() &&
                 e["SpecialToken"].is_object() && e["SpecialToken"].contains("id") && e["SpecialToken"]["id"].is_string()) {
        lead = e["SpecialToken"]["id"].get<std::string>();
      } else {
        fail("{}: TemplateProcessing's single template {} is not supported (only $A, optionally after one special "
             "token)", what, json_text(single));
      }
    }
    if (!text) fail("{}: TemplateProcessing's single template has no $A", what);
    return lead;
  }
};

// "a b" or ["a", "b"].
std::pair<std::string, std::string> merge_pair(const json& m, size_t r, const std::string& what) {
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return {m[0].get<std::string>(), m[1].get<std::string>()};
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    size_t sp = s.find(' ');
    if (sp != std::string::npos && sp > 0 && sp + 1 < s.size() && s.find(' ', sp + 1) == std::string::npos)
      return {s.substr(0, sp), s.substr(sp + 1)};
  }
  fail("{}: merge {} must be \"left right\" or [left, right], got {}", what, r, json_text(m).substr(0, 80));
}

Tokenizer read(const json& j, const std::string& what, const TokenizerOptions& opt) {
  HfReader rd{j, what};
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) fail("{}: no \"model\" object", what);
  rd.check_top();
  const json& m = j["model"];
  if (m.contains("type")) {
    std::string t = rd.type_of(m, "the model");
    if (t != "BPE") fail("{}: model {} is not supported (only BPE)", what, t);
  }
  rd.require_off(m, "dropout", "BPE");
  rd.require_off(m, "continuing_subword_prefix", "BPE");
  rd.require_off(m, "end_of_word_suffix", "BPE");
  if (m.contains("ignore_merges") && !m["ignore_merges"].is_boolean()) fail("{}: ignore_merges must be true or false", what);
  TokenizerParts p;
  p.kind = "hf";
  p.ignore_merges = m.value("ignore_merges", false);
  p.pattern = rd.pattern();
  std::string preferred = rd.post_processor(j.contains("post_processor") ? j["post_processor"] : json());
  if (!m.contains("vocab") || !m["vocab"].is_object()) fail("{}: model has no vocab object", what);
  if (!m.contains("merges") || !m["merges"].is_array()) fail("{}: model has no merges list", what);
  const json& vj = m["vocab"];
  const json& mj = m["merges"];
  const json& aj = j.contains("added_tokens") ? j["added_tokens"] : json::array();
  if (!aj.is_array()) fail("{}: added_tokens must be a list", what);

  // Ids: the largest bounds the vocabulary, checked before anything is sized by it.
  uint64_t vocab_size = 0;
  std::unordered_map<std::string, uint32_t> ids;
  ids.reserve(vj.size());
  for (auto it = vj.begin(); it != vj.end(); ++it) {
    uint32_t id = json_int<uint32_t>(it.value(), what + ": id of vocab token " + json_text(json(it.key())));
    ids.emplace(it.key(), id);
    vocab_size = std::max<uint64_t>(vocab_size, uint64_t(id) + 1);
  }
  std::vector<std::pair<std::string, uint32_t>> added;
  for (auto& a : aj) {
    if (!a.is_object() || !a.contains("content") || !a["content"].is_string() || !a.contains("id"))
      fail("{}: each added token needs \"id\" and \"content\"", what);
    uint32_t id = json_int<uint32_t>(a["id"], what + ": added token id");
    added.emplace_back(a["content"].get<std::string>(), id);
    vocab_size = std::max<uint64_t>(vocab_size, uint64_t(id) + 1);
  }
  if (vocab_size > kMaxVocab) fail("{}: ids up to {} are too many (at most {})", what, vocab_size - 1, kMaxVocab);
  p.vocab_size = uint32_t(vocab_size);

  std::vector<uint8_t> defined(vocab_size, 0), is_added(vocab_size, 0);
  std::vector<uint32_t> added_at(vocab_size, 0);  // index in `added` of an added id
  for (size_t i = 0; i < added.size(); ++i) {
    const auto& [content, id] = added[i];
    if (is_added[id]) fail("{}: two added tokens have id {}", what, id);
    is_added[id] = 1;
    added_at[id] = uint32_t(i);
    p.specials.emplace_back(content, id);
    defined[id] = 1;
  }
  // Vocabulary texts: GPT-2's alphabet spells bytes.
  std::vector<std::string> bytes(vocab_size);
  std::vector<uint8_t> has_text(vocab_size, 0);
  const ByteLevel& bl = byte_level();
  for (auto& [tok, id] : ids) {
    if (is_added[id]) {
      const std::string& content = added[added_at[id]].first;
      if (content != tok)
        fail("{}: id {} is vocab token {} and added token {}", what, id, json_text(json(tok)), json_text(json(content)));
      continue;
    }
    if (has_text[id]) fail("{}: id {} is given to two vocab tokens", what, id);
    if (!bl.decode(tok, bytes[id]))
      fail("{}: vocab token {} (id {}) is not byte-level text (GPT-2's byte alphabet)", what, json_text(json(tok)), id);
    check_token_size(bytes[id].size(), what, fmt::format("vocab token {}", id));
    has_text[id] = 1;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = ids.find(bl.spell[b]);
    if (it == ids.end() || is_added[it->second])
      fail("{}: the vocab has no token for byte {} ({})", what, b, json_text(json(bl.spell[b])));
    p.byte_id[b] = it->second;
  }
  // Merges; a pair listed twice keeps its last rank, as Hugging Face does.
  std::unordered_map<uint64_t, size_t> last;
  std::vector<std::array<uint32_t, 3>> all(mj.size());
  std::vector<uint8_t> made(vocab_size, 0);
  for (size_t r = 0; r < mj.size(); ++r) {
    const std::pair<std::string, std::string> ab = merge_pair(mj[r], r, what);
    const std::string &a = ab.first, &b = ab.second;
    auto id = [&](const std::string& s) {
      auto it = ids.find(s);
      if (it == ids.end()) fail("{}: merge {} ({} {}): {} is not in the vocab", what, r, a, b, json_text(json(s)));
      if (is_added[it->second]) fail("{}: merge {} ({} {}) uses the added token {}", what, r, a, b, s);
      return it->second;
    };
    all[r] = {id(a), id(b), id(a + b)};
    last[PairMap::key(all[r][0], all[r][1])] = r;
  }
  for (size_t r = 0; r < all.size(); ++r) {
    if (last[PairMap::key(all[r][0], all[r][1])] != r) continue;
    p.merges.push_back(all[r]);
    p.merge_rank.push_back(uint32_t(r));
    made[all[r][2]] = 1;
  }
  if (p.merges.size() == all.size()) p.merge_rank.clear();  // ranks are the indices
  for (int b = 0; b < 256; ++b) {
    if (made[p.byte_id[b]]) fail("{}: a merge makes the byte token {}", what, b);
    made[p.byte_id[b]] = 1;
    defined[p.byte_id[b]] = 1;
  }
  for (uint32_t id = 0; id < vocab_size; ++id) {
    if (!has_text[id]) continue;
    defined[id] = 1;
    if (!made[id]) p.tokens.emplace_back(id, bytes[id]);
  }
  fill_unused_ids(p, defined, what);
  choose_bos(p, opt, preferred, what);
  return build_tokenizer(std::move(p), what);
}

}  // namespace

Tokenizer parse_hf_tokenizer(const nlohmann::json& j, const std::string& what, const TokenizerOptions& opt) {
  try {
    return read(j, what, opt);
  } catch (const json::exception& e) {
    fail("malformed tokenizer file {}: {}", what, e.what());
  }
}

Tokenizer parse_hf_tokenizer_text(std::string_view text, const std::string& what, const TokenizerOptions& opt) {
  check_tokenizer_size(text.size(), what);
  json j;
  if (std::string why; !try_parse_json(text, j, &why)) fail("malformed tokenizer file {}: {}", what, why);
  return parse_hf_tokenizer(j, what, opt);
}

}  // namespace clm

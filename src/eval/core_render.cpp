// CORE prompt construction: the published item order and few-shot choice (CPython's random,
// replicated in pyrandom.cpp), the per-type prompt templates, and the token spans that get scored.
#include "core/common.h"
#include "eval/core.h"
#include "eval/pyrandom.h"

namespace clm {

void core_shuffle(std::vector<nlohmann::json>& items) {
  PyRandom rng(1337);
  rng.shuffle(items);
}

std::vector<int64_t> core_fewshot_indices(int64_t n, int64_t idx, int k) {
  if (k <= 0) return {};
  if (n - 1 < k) fail("CORE: {} few-shot examples requested but the task has only {} other items", k, n - 1);
  // The population is [i for i in range(n) if i != idx]; position p in it is item p + (p >= idx).
  PyRandom rng(1234 + (uint64_t)idx);
  std::vector<int64_t> pos = rng.sample_positions(n - 1, k);
  for (auto& p : pos) p += p >= idx ? 1 : 0;
  return pos;
}

namespace {

// Decodes the UTF-8 code point at s[i] (invalid bytes count as one non-space unit).
uint32_t cp_at(std::string_view s, size_t i, size_t& len) {
  unsigned char c = (unsigned char)s[i];
  int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) { len = 1; return 0xFFFFFFFFu; }
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < n; k++) {
    unsigned char d = (unsigned char)s[i + k];
    if ((d & 0xC0) != 0x80) { len = 1; return 0xFFFFFFFFu; }
    cp = (cp << 6) | (d & 0x3F);
  }
  len = n;
  return cp;
}

// Python's str.isspace(): bidirectional class WS/B/S or category Zs.
bool py_isspace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

const std::string& str_field(const nlohmann::json& item, const char* key) {
  if (!item.contains(key) || !item[key].is_string()) fail("CORE item without a string '{}'", key);
  return item[key].get_ref<const std::string&>();
}

const nlohmann::json& list_field(const nlohmann::json& item, const char* key) {
  if (!item.contains(key) || !item[key].is_array() || item[key].empty())
    fail("CORE item without a non-empty list '{}'", key);
  for (const auto& v : item[key])
    if (!v.is_string()) fail("CORE item: '{}' must hold strings", key);
  return item[key];
}

int gold_of(const nlohmann::json& item, size_t n_options) {
  if (!item.contains("gold") || !item["gold"].is_number_integer()) fail("CORE item without an integer 'gold'");
  int64_t g = item["gold"].get<int64_t>();  // wider than int, so a huge gold cannot wrap into range
  if (g < 0 || (uint64_t)g >= n_options) fail("CORE item: gold {} outside 0..{}", g, n_options - 1);
  return int(g);
}

}  // namespace

std::string py_strip(std::string_view s) {
  // Walk the code points once; remember where the first non-space starts and the last one ends.
  size_t first = s.size(), last_end = 0, len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    if (!py_isspace(cp_at(s, i, len))) {
      if (first == s.size()) first = i;
      last_end = i + len;
    }
  }
  if (first == s.size()) return "";
  return std::string(s.substr(first, last_end - first));
}

std::vector<std::string> render_core_prompts(const CoreTask& task, const nlohmann::json& item,
                                             const std::vector<const nlohmann::json*>& shots) {
  const std::string& d = task.delimiter;
  std::string prefix;  // rendered shots, each followed by a blank line
  for (const nlohmann::json* s : shots) {
    switch (task.type) {
      case CoreTaskType::MultipleChoice: {
        const auto& ch = list_field(*s, "choices");
        prefix += str_field(*s, "query") + d + ch[gold_of(*s, ch.size())].get<std::string>();
        break;
      }
      case CoreTaskType::Schema: {
        const auto& opts = list_field(*s, "context_options");
        prefix += opts[gold_of(*s, opts.size())].get<std::string>() + d + str_field(*s, "continuation");
        break;
      }
      case CoreTaskType::LanguageModeling:
        prefix += py_strip(str_field(*s, "context")) + d + str_field(*s, "continuation");
        break;
    }
    prefix += "\n\n";
  }
  std::vector<std::string> prompts;
  switch (task.type) {
    case CoreTaskType::MultipleChoice: {
      const std::string& q = str_field(item, "query");
      for (const auto& c : list_field(item, "choices")) prompts.push_back(prefix + q + d + c.get<std::string>());
      gold_of(item, prompts.size());
      break;
    }
    case CoreTaskType::Schema: {
      const std::string& cont = str_field(item, "continuation");
      for (const auto& c : list_field(item, "context_options"))
        prompts.push_back(prefix + c.get<std::string>() + d + cont);
      gold_of(item, prompts.size());
      break;
    }
    case CoreTaskType::LanguageModeling: {
      std::string without = prefix + py_strip(str_field(item, "context")) + d;
      std::string with = without + str_field(item, "continuation");
      // The reference strips the continuation-less prompt so that trailing whitespace (a space
      // delimiter) is not left dangling as a separate token before the continuation.
      prompts.push_back(py_strip(without));
      prompts.push_back(std::move(with));
      break;
    }
  }
  return prompts;
}

CoreExample build_core_example(CoreTaskType type, std::vector<std::vector<int32_t>> tokens, int gold,
                               int context) {
  if (tokens.empty()) fail("CORE: an item with no prompts");
  CoreExample ex;
  ex.gold = type == CoreTaskType::LanguageModeling ? 0 : gold;
  size_t min_len = tokens[0].size();
  for (const auto& t : tokens) min_len = std::min(min_len, t.size());
  std::vector<int> start(tokens.size()), end(tokens.size());
  if (type == CoreTaskType::MultipleChoice) {
    size_t common = 0;  // longest prefix shared by all choices
    while (common < min_len) {
      bool same = true;
      for (const auto& t : tokens) same = same && t[common] == tokens[0][common];
      if (!same) break;
      common++;
    }
    for (size_t r = 0; r < tokens.size(); r++) { start[r] = (int)common; end[r] = (int)tokens[r].size(); }
  } else if (type == CoreTaskType::Schema) {
    size_t common = 0;  // longest suffix shared by all options
    while (common < min_len) {
      bool same = true;
      for (const auto& t : tokens) same = same && t[t.size() - 1 - common] == tokens[0][tokens[0].size() - 1 - common];
      if (!same) break;
      common++;
    }
    for (size_t r = 0; r < tokens.size(); r++) {
      end[r] = (int)tokens[r].size();
      start[r] = end[r] - (int)common;
    }
  } else {
    if (tokens.size() != 2) fail("CORE: a language-modeling item needs 2 prompts");
    const auto& without = tokens[0];
    const auto& with = tokens[1];
    size_t s = without.size();
    bool prefix = s <= with.size() && std::equal(without.begin(), without.end(), with.begin());
    if (!prefix) {  // tokenizer merged across the boundary: score from the first differing token
      ex.prefix_mismatch = true;
      s = 0;
      while (s < without.size() && s < with.size() && without[s] == with[s]) s++;
    }
    tokens.erase(tokens.begin());
    start = {(int)s};
    end = {(int)tokens[0].size()};
  }
  for (size_t r = 0; r < tokens.size(); r++) {
    CoreRow row;
    row.tokens = std::move(tokens[r]);
    row.start = start[r];
    row.end = end[r];
    if ((int)row.tokens.size() > context) {  // keep the last `context` tokens
      int crop = (int)row.tokens.size() - context;
      row.tokens.erase(row.tokens.begin(), row.tokens.begin() + crop);
      row.start -= crop;
      row.end -= crop;
    }
    // Position p-1 predicts token p, so the first scorable token is 1; an empty span (a choice
    // whose tokens are a prefix of another's) scores its last token instead of nothing.
    row.start = std::max(row.start, 1);
    if (row.start >= row.end) row.start = std::max(1, row.end - 1);
    if (row.end <= row.start) fail("CORE: a prompt of {} tokens leaves nothing to score", row.tokens.size());
    ex.rows.push_back(std::move(row));
  }
  return ex;
}

}  // namespace clm

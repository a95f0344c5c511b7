// CORE bundle loading: the small YAML subset of core.yaml, the CSV of random baselines, and the
// JSON Lines task files. Every malformed input is an Error naming the file and line.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/common.h"
#include "core/json_get.h"
#include "core/json_parse.h"
#include "eval/core.h"

namespace clm {

const char* core_task_type_name(CoreTaskType t) {
  switch (t) {
    case CoreTaskType::MultipleChoice: return "multiple_choice";
    case CoreTaskType::Schema: return "schema";
    case CoreTaskType::LanguageModeling: return "language_modeling";
  }
  return "?";
}

namespace {

std::string trim_ascii(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t' || s[a] == '\r')) a++;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\r')) b--;
  return std::string(s.substr(a, b - a));
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) out += (char)cp;
  else if (cp < 0x800) { out += (char)(0xC0 | (cp >> 6)); out += (char)(0x80 | (cp & 0x3F)); }
  else if (cp < 0x10000) {
    out += (char)(0xE0 | (cp >> 12)); out += (char)(0x80 | ((cp >> 6) & 0x3F));
    out += (char)(0x80 | (cp & 0x3F));
  } else {
    out += (char)(0xF0 | (cp >> 18)); out += (char)(0x80 | ((cp >> 12) & 0x3F));
    out += (char)(0x80 | ((cp >> 6) & 0x3F)); out += (char)(0x80 | (cp & 0x3F));
  }
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Parses one YAML scalar starting at s[i]; advances i past it. Stops plain scalars at `stops`.
std::string yaml_scalar(std::string_view s, size_t& i, const std::string& where, const char* stops) {
  std::string out;
  if (i < s.size() && s[i] == '"') {
    i++;
    while (true) {
      if (i >= s.size()) fail("{}: unterminated double-quoted string", where);
      char c = s[i++];
      if (c == '"') break;
      if (c != '\\') { out += c; continue; }
      if (i >= s.size()) fail("{}: unterminated escape", where);
      char e = s[i++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case ' ': out += ' '; break;
        case 'x': case 'u': case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n > s.size()) fail("{}: short \\{} escape", where, e);
          uint32_t cp = 0;
          for (size_t k = 0; k < n; k++) {
            int h = hex_digit(s[i + k]);
            if (h < 0) fail("{}: bad \\{} escape", where, e);
            cp = cp * 16 + uint32_t(h);
          }
          if (cp > 0x10FFFF) fail("{}: \\{} escape beyond Unicode", where, e);
          append_utf8(out, cp);
          i += n;
          break;
        }
        default: fail("{}: unsupported escape \\{}", where, e);
      }
    }
  } else if (i < s.size() && s[i] == '\'') {
    i++;
    while (true) {
      if (i >= s.size()) fail("{}: unterminated single-quoted string", where);
      char c = s[i++];
      if (c == '\'') {
        if (i < s.size() && s[i] == '\'') { out += '\''; i++; continue; }
        break;
      }
      out += c;
    }
  } else {
    size_t a = i;
    while (i < s.size() && !std::strchr(stops, s[i])) {
      if (s[i] == '#' && i > a && (s[i - 1] == ' ' || s[i - 1] == '\t')) break;  // comment
      i++;
    }
    out = trim_ascii(s.substr(a, i - a));
  }
  return out;
}

// A mapping value: scalar or flow list; the rest of the line must be empty or a comment.
nlohmann::json yaml_value(std::string_view s, const std::string& where) {
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') i++;
  nlohmann::json v;
  if (i < s.size() && s[i] == '[') {
    i++;
    v = nlohmann::json::array();
    while (true) {
      while (i < s.size() && s[i] == ' ') i++;
      if (i >= s.size()) fail("{}: unterminated flow list", where);
      if (s[i] == ']') { i++; break; }
      v.push_back(yaml_scalar(s, i, where, ",]"));
      while (i < s.size() && s[i] == ' ') i++;
      if (i < s.size() && s[i] == ',') i++;
      else if (i < s.size() && s[i] == ']') { i++; break; }
      else fail("{}: malformed flow list", where);
    }
  } else if (i < s.size() && (s[i] == '{' || s[i] == '|' || s[i] == '>' || s[i] == '&' || s[i] == '*')) {
    fail("{}: YAML feature not supported by clocklm's core.yaml reader", where);
  } else {
    v = yaml_scalar(s, i, where, "");
  }
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) i++;
  if (i < s.size() && s[i] != '#') fail("{}: unexpected text after value", where);
  return v;
}

}  // namespace

nlohmann::json parse_core_yaml(std::string_view text, const std::string& what) {
  nlohmann::json root = nlohmann::json::object();
  std::string top;           // current top-level key holding a list
  nlohmann::json* cur = nullptr;  // current list item (mapping)
  int item_indent = -1;
  size_t pos = 0;
  int lineno = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    lineno++;
    std::string where = fmt::format("{}:{}", what, lineno);
    std::string t = trim_ascii(line);
    if (t.empty() || t[0] == '#' || t == "---") continue;
    if (line.find('\t') != std::string_view::npos && line.find('\t') < line.find_first_not_of(" \t"))
      fail("{}: tab indentation", where);
    int indent = (int)line.find_first_not_of(' ');
    std::string_view body = line.substr(indent);
    if (indent == 0 && body[0] != '-') {
      size_t c = body.find(':');
      if (c == std::string_view::npos) fail("{}: expected 'key:'", where);
      top = trim_ascii(body.substr(0, c));
      std::string rest = trim_ascii(body.substr(c + 1));
      if (rest.empty() || rest[0] == '#') root[top] = nlohmann::json::array();
      else root[top] = yaml_value(body.substr(c + 1), where);
      cur = nullptr;
      continue;
    }
    if (top.empty() || !root[top].is_array()) fail("{}: list item or key outside a list", where);
    if (body[0] == '-' && (body.size() == 1 || body[1] == ' ')) {
      root[top].push_back(nlohmann::json::object());
      cur = &root[top].back();
      item_indent = -1;
      body = body.substr(1);
      size_t k = body.find_first_not_of(' ');
      if (k == std::string_view::npos) continue;  // "-" alone: keys follow on the next lines
      indent += 1 + (int)k;
      body = body.substr(k);
    }
    if (!cur) fail("{}: key outside a list item", where);
    if (item_indent < 0) item_indent = indent;
    else if (indent != item_indent) fail("{}: inconsistent indentation (nested mappings are not supported)", where);
    size_t c = body.find(':');
    if (c == std::string_view::npos || (c + 1 < body.size() && body[c + 1] != ' '))
      fail("{}: expected 'key: value'", where);
    std::string key = trim_ascii(body.substr(0, c));
    if (key.empty()) fail("{}: empty key", where);
    if (cur->contains(key)) fail("{}: duplicate key '{}'", where, key);
    (*cur)[key] = yaml_value(body.substr(c + 1), where);
  }
  // YAML is UTF-8; checked once here (escapes can also spell surrogates), so every later use of
  // the values, such as writing them into the result JSON, can rely on it.
  try {
    (void)root.dump();
  } catch (const nlohmann::json::type_error&) {
    fail("{}: not valid UTF-8", what);
  }
  return root;
}

std::vector<std::vector<std::string>> parse_csv(std::string_view s, const std::string& what) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool in_quotes = false, field_started = false;
  int line = 1;
  for (size_t i = 0; i < s.size(); i++) {
    char c = s[i];
    if (in_quotes) {
      if (c == '"') {
        if (i + 1 < s.size() && s[i + 1] == '"') { field += '"'; i++; }
        else in_quotes = false;
      } else {
        if (c == '\n') line++;
        field += c;
      }
      continue;
    }
    if (c == '"') {
      if (field_started && !field.empty()) fail("{}:{}: quote inside an unquoted field", what, line);
      in_quotes = true;
      field_started = true;
    } else if (c == ',') {
      row.push_back(std::move(field)); field.clear(); field_started = false;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') i++;
      row.push_back(std::move(field)); field.clear(); field_started = false;
      rows.push_back(std::move(row)); row.clear();
      line++;
    } else {
      field += c; field_started = true;
    }
  }
  if (in_quotes) fail("{}:{}: unterminated quoted field", what, line);
  if (field_started || !row.empty()) { row.push_back(std::move(field)); rows.push_back(std::move(row)); }
  return rows;
}

std::vector<nlohmann::json> parse_core_items(std::string_view text, const std::string& path) {
  std::vector<nlohmann::json> items;
  size_t pos = 0;
  int lineno = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    lineno++;
    if (trim_ascii(line).empty()) continue;
    items.push_back(parse_json(line, fmt::format("{}:{}", path, lineno)));
    if (!items.back().is_object()) fail("{}:{}: expected a JSON object", path, lineno);
  }
  return items;
}

std::vector<nlohmann::json> load_core_items(const std::string& path) {
  return parse_core_items(read_file(path), path);
}

// More shots than any published task uses by orders of magnitude; a larger count is a typo.
constexpr long kMaxFewshot = 1000;

std::vector<CoreTask> load_core_tasks(const std::string& bundle) {
  std::string ypath = bundle + "/core.yaml", mpath = bundle + "/eval_meta_data.csv";
  if (!path_exists(ypath)) fail("CORE bundle {}: core.yaml not found", bundle);
  if (!path_exists(mpath)) fail("CORE bundle {}: eval_meta_data.csv not found", bundle);
  return parse_core_tasks(read_file(ypath), read_file(mpath), ypath, mpath);
}

std::vector<CoreTask> parse_core_tasks(std::string_view yaml, std::string_view meta_csv,
                                       const std::string& ypath, const std::string& mpath) {
  nlohmann::json y = parse_core_yaml(yaml, ypath);
  if (!y.contains("icl_tasks") || !y["icl_tasks"].is_array() || y["icl_tasks"].empty())
    fail("{}: no 'icl_tasks' list", ypath);

  auto csv = parse_csv(meta_csv, mpath);
  if (csv.empty()) fail("{}: empty", mpath);
  int col_task = -1, col_base = -1;
  for (int c = 0; c < (int)csv[0].size(); c++) {
    std::string h = trim_ascii(csv[0][c]);
    if (h == "Eval Task") col_task = c;
    if (h == "Random baseline") col_base = c;
  }
  if (col_task < 0 || col_base < 0) fail("{}: needs columns 'Eval Task' and 'Random baseline'", mpath);
  std::map<std::string, double> baselines;
  for (size_t r = 1; r < csv.size(); r++) {
    if (csv[r].size() <= (size_t)std::max(col_task, col_base)) continue;
    std::string name = trim_ascii(csv[r][col_task]), b = trim_ascii(csv[r][col_base]);
    char* endp = nullptr;
    double v = std::strtod(b.c_str(), &endp);
    if (b.empty() || *endp || !std::isfinite(v))
      fail("{}: row {}: bad random baseline '{}'", mpath, r + 1, b);
    baselines[name] = v;
  }

  std::vector<CoreTask> tasks;
  for (size_t k = 0; k < y["icl_tasks"].size(); k++) {
    const auto& t = y["icl_tasks"][k];
    auto need = [&](const char* key) -> const nlohmann::json& {
      if (!t.contains(key)) fail("{}: task #{} has no '{}'", ypath, k + 1, key);
      return t[key];
    };
    auto text = [&](const char* key) -> const std::string& {
      return json_str(need(key), fmt::format("{}: task #{}: '{}'", ypath, k + 1, key));
    };
    CoreTask task;
    task.label = text("label");
    task.dataset_uri = text("dataset_uri");
    std::string type = text("icl_task_type");
    if (type == "multiple_choice") task.type = CoreTaskType::MultipleChoice;
    else if (type == "schema") task.type = CoreTaskType::Schema;
    else if (type == "language_modeling") task.type = CoreTaskType::LanguageModeling;
    else fail("{}: task '{}': unsupported icl_task_type '{}'", ypath, task.label, type);
    const auto& shots = need("num_fewshot");
    std::string what = fmt::format("{}: task '{}': num_fewshot", ypath, task.label);
    std::string s0 =
        shots.is_array() ? (shots.empty() ? "" : json_str(shots[0], what)) : json_str(shots, what);
    char* endp = nullptr;
    long nshot = std::strtol(s0.c_str(), &endp, 10);
    if (s0.empty() || *endp || nshot < 0 || nshot > kMaxFewshot)
      fail("{}: task '{}': bad num_fewshot", ypath, task.label);
    task.num_fewshot = (int)nshot;
    if (t.contains("continuation_delimiter"))
      task.delimiter = json_str(t["continuation_delimiter"],
                                fmt::format("{}: task '{}': continuation_delimiter", ypath, task.label));
    auto it = baselines.find(task.label);
    if (it == baselines.end()) fail("{}: no random baseline for task '{}'", mpath, task.label);
    task.random_baseline = it->second;
    tasks.push_back(task);
  }
  return tasks;
}

}  // namespace clm

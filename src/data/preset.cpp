// The built-in Debian corpus presets (see preset.h and docs/DATA.md). Each source is a file
// pattern owned by one Debian package and a rule for cutting the file into documents: whole
// manuals are cut at paragraph boundaries into documents of a few KB so that the held-out
// validation fraction samples every manual instead of taking or leaving a whole book.
#include "data/preset.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>

#include "core/common.h"

namespace clm {

namespace fs = std::filesystem;

namespace {

enum class Kind { info, fortunes, jargon, text };

struct Source {
  const char* pattern;  // glob(3)
  const char* package;  // Debian package that ships it
  Kind kind;
  bool newest_only;     // several versions may be installed (python3.X-doc): take the newest
};

// debian-docs: ~26 MB of English prose and technical writing.
const Source kDebianDocs[] = {
    {"/usr/share/info/python3.*.info.gz", "python3-doc", Kind::info, true},
    {"/usr/share/info/standards.info.gz", "gnu-standards", Kind::info, false},
    {"/usr/share/info/maintain.info.gz", "gnu-standards", Kind::info, false},
    {"/usr/share/doc/jargon-text/jargon.txt.gz", "jargon-text", Kind::jargon, false},
    {"/usr/share/games/fortunes/*.dat", "fortunes", Kind::fortunes, false},
    {"/usr/share/debian-reference/debian-reference.en.txt.gz", "debian-reference-en", Kind::text, false},
    {"/usr/share/doc/debian-policy/*.txt.gz", "debian-policy", Kind::text, false},
    {"/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz", "debian-faq", Kind::text, false},
    {"/usr/share/doc/maint-guide/maint-guide.en.txt.gz", "maint-guide", Kind::text, false},
    {"/usr/share/developers-reference/_sources/*.rst.txt", "developers-reference", Kind::text, false},
};

std::vector<std::string> glob_files(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> out;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) out.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  globfree(&g);
  return out;
}

// "python3.11.info.gz" sorts before "python3.9.info.gz" as text; compare the minor version.
int python_minor(const std::string& path) {
  auto pos = path.rfind("python3.");
  return pos == std::string::npos ? -1 : std::atoi(path.c_str() + pos + 8);
}

Kind kind_of(const std::string& path) {
  auto ends = [&](std::string_view suf) {
    return path.size() >= suf.size() && std::string_view(path).substr(path.size() - suf.size()) == suf;
  };
  if (ends(".info.gz")) return Kind::info;
  if (path.find("/games/fortunes/") != std::string::npos) return Kind::fortunes;
  if (path.find("jargon") != std::string::npos) return Kind::jargon;
  return Kind::text;
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t p = 0;
  while (p < text.size()) {
    size_t nl = text.find('\n', p);
    if (nl == std::string_view::npos) nl = text.size();
    lines.push_back(text.substr(p, nl - p));
    p = nl + 1;
  }
  return lines;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Manuals: paragraphs (blank-line separated) gathered into documents of at least ~8 KB.
std::vector<std::string> split_paragraph_chunks(std::string_view text, size_t target = 8192) {
  std::vector<std::string> docs;
  std::string cur;
  size_t p = 0;
  while (p < text.size()) {
    size_t e = text.find("\n\n", p);
    if (e == std::string_view::npos) e = text.size();
    else e += 2;
    cur.append(text.substr(p, e - p));
    p = e;
    if (cur.size() >= target) {
      std::string_view t = trim(cur);
      if (!t.empty()) docs.emplace_back(t);
      cur.clear();
    }
  }
  std::string_view t = trim(cur);
  if (!t.empty()) docs.emplace_back(t);
  return docs;
}

}  // namespace

std::vector<std::string> split_info(std::string_view text) {
  std::vector<std::string> docs;
  size_t p = text.find('\x1f');  // the preamble before the first node is makeinfo boilerplate
  while (p != std::string_view::npos) {
    size_t e = text.find('\x1f', p + 1);
    std::string_view node = text.substr(p + 1, (e == std::string_view::npos ? text.size() : e) - p - 1);
    p = e;
    node = trim(node);
    if (node.rfind("File:", 0) != 0) continue;  // tag tables, indirect tables, local variables
    size_t nl = node.find('\n');
    node = nl == std::string_view::npos ? std::string_view() : node.substr(nl + 1);  // header line
    size_t menu = node.find("* Menu:");
    if (menu != std::string_view::npos) node = node.substr(0, menu);  // menus are navigation, not prose
    // Index markers: "\0\b[index\0\b]" and similar.
    std::string clean;
    clean.reserve(node.size());
    for (size_t i = 0; i < node.size(); ++i) {
      if (node[i] == '\0' && i + 1 < node.size() && node[i + 1] == '\b') {
        size_t close = node.find(std::string_view("\0\b]", 3), i + 2);
        if (close == std::string_view::npos) break;
        i = close + 2;
        continue;
      }
      clean += node[i];
    }
    std::string_view t = trim(clean);
    if (t.size() >= 64) docs.emplace_back(t);
  }
  return docs;
}

std::vector<std::string> split_fortunes(std::string_view text) {
  std::vector<std::string> docs;
  std::string cur;
  for (std::string_view line : lines_of(text)) {
    if (line == "%") {
      std::string_view t = trim(cur);
      if (!t.empty()) docs.emplace_back(t);
      cur.clear();
    } else {
      cur.append(line);
      cur += '\n';
    }
  }
  std::string_view t = trim(cur);
  if (!t.empty()) docs.emplace_back(t);
  return docs;
}

std::vector<std::string> split_jargon(std::string_view text) {
  // Skip the title page and table of contents (everything before "Chapter 1."), then start a new
  // document at every chapter heading and every lexicon entry ("   :term: ...").
  std::vector<std::string> docs;
  std::string cur;
  bool started = false;
  auto flush = [&] {
    std::string_view t = trim(cur);
    if (!t.empty()) docs.emplace_back(t);
    cur.clear();
  };
  for (std::string_view line : lines_of(text)) {
    bool chapter = line.rfind("Chapter ", 0) == 0;
    if (!started) {
      if (line.rfind("Chapter 1.", 0) != 0) continue;
      started = true;
    }
    bool entry = line.size() > 4 && line.rfind("   :", 0) == 0 && line.find(':', 4) != std::string_view::npos;
    if (chapter || entry) flush();
    if (line.rfind("   ", 0) == 0) line.remove_prefix(3);  // the whole text is indented by three
    cur.append(line);
    cur += '\n';
  }
  flush();
  return docs;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> list = {
      {"debian-docs",
       "English prose and technical writing shipped by Debian: the Python manual, GNU coding standards, "
       "the Jargon File, fortune cookies, Debian reference/policy/FAQ/guides (~26 MB)",
       8192, 0.02},
  };
  return list;
}

const Preset& find_preset(const std::string& name) {
  std::string names;
  for (const Preset& p : presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  fail("unknown preset '{}' (known: {})", name, names);
}

std::vector<std::string> preset_files(const std::string& name) {
  find_preset(name);
  std::vector<std::string> files;
  for (const Source& s : kDebianDocs) {
    std::vector<std::string> found = glob_files(s.pattern);
    if (s.kind == Kind::fortunes) {
      // fortune(6) data files are the ones with a .dat index; the .u8 names are links to them.
      for (auto& f : found) f.resize(f.size() - 4);
      std::erase_if(found, [](const std::string& f) {
        std::error_code ec;
        return !fs::is_regular_file(fs::symlink_status(f, ec)) || f.ends_with("ascii-art");
      });
    }
    if (s.newest_only && found.size() > 1) {
      auto best = std::max_element(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
        return python_minor(a) < python_minor(b);
      });
      found = {*best};
    }
    if (found.empty())
      fail("preset {} needs {} from the Debian package {}; install it (scripts/setup.sh installs every "
           "package in scripts/corpus-packages.txt) or run `apt-get install {}`",
           name, s.pattern, s.package, s.package);
    files.insert(files.end(), found.begin(), found.end());
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

void for_each_preset_document(const std::vector<std::string>& files,
                              const std::function<bool(std::string_view doc)>& fn, CorpusStats* stats) {
  CorpusStats local;
  CorpusStats& st = stats ? *stats : local;
  for (const std::string& path : files) {
    std::string text = read_corpus_file(path, &st.input_bytes);
    st.files++;
    std::vector<std::string> docs;
    switch (kind_of(path)) {
      case Kind::info: docs = split_info(text); break;
      case Kind::fortunes: docs = split_fortunes(text); break;
      case Kind::jargon: docs = split_jargon(text); break;
      case Kind::text: docs = split_paragraph_chunks(text); break;
    }
    for (const std::string& d : docs) {
      st.documents++;
      st.bytes += int64_t(d.size());
      if (!fn(d)) return;
    }
  }
}

}  // namespace clm

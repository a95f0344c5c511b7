// Corpus readers (see corpus.h): expand inputs into files, then stream documents out of them.
// Compressed files are decompressed in a streaming fashion with large buffers, and JSON lines are
// parsed by a small validating scanner that only materialises the "text" field, because the
// general-purpose JSON parser would build a whole DOM per line and be the bottleneck of `prepare`.
#include "data/corpus.h"

#include <fcntl.h>
#include <glob.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/common.h"
#include "data/parquet.h"

namespace clm {

namespace fs = std::filesystem;

// ---- file kinds ---------------------------------------------------------------------------

static bool ends_with(std::string_view s, std::string_view suf) {
  return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}

CorpusFileKind corpus_file_kind(std::string_view path) {
  if (ends_with(path, ".jsonl")) return {true, Compression::none};
  if (ends_with(path, ".jsonl.zst")) return {true, Compression::zstd};
  if (ends_with(path, ".jsonl.gz")) return {true, Compression::gzip};
  if (ends_with(path, ".txt")) return {false, Compression::none};
  if (ends_with(path, ".txt.zst")) return {false, Compression::zstd};
  if (ends_with(path, ".txt.gz")) return {false, Compression::gzip};
  if (is_parquet_path(path)) return {false, Compression::none, true};
  return {false, Compression::unsupported};
}

static const char* kSupported = ".txt, .jsonl, .jsonl.zst, .jsonl.gz, .parquet (also .txt.zst, .txt.gz)";

static bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// Supported files under a folder, recursively; hidden files and folders are skipped.
static void walk_folder(const std::string& dir, std::vector<std::string>& out) {
  std::error_code ec;
  auto opts = fs::directory_options::follow_directory_symlink | fs::directory_options::skip_permission_denied;
  fs::recursive_directory_iterator it(dir, opts, ec), end;
  if (ec) fail("cannot list folder {}: {}", dir, ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) fail("cannot list folder {}: {}", dir, ec.message());
    std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;
    std::string p = it->path().string();
    if (corpus_file_kind(p).compression != Compression::unsupported) out.push_back(p);
  }
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::vector<std::string> found;
    std::error_code ec;
    if (fs::exists(in, ec)) {
      if (fs::is_directory(in, ec)) {
        walk_folder(in, found);
        if (found.empty()) fail("input folder {} holds no corpus files ({})", in, kSupported);
      } else {
        if (corpus_file_kind(in).compression == Compression::unsupported)
          fail("input {} has an unsupported extension (supported: {})", in, kSupported);
        found.push_back(in);
      }
    } else if (has_glob_chars(in)) {
      glob_t g{};
      int rc = ::glob(in.c_str(), GLOB_NOSORT, nullptr, &g);
      if (rc != 0 && rc != GLOB_NOMATCH) {
        globfree(&g);
        fail("cannot expand input pattern {}", in);
      }
      std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + g.gl_pathc);
      globfree(&g);
      for (const std::string& m : matches) {
        if (fs::is_directory(m, ec)) walk_folder(m, found);
        else if (corpus_file_kind(m).compression != Compression::unsupported) found.push_back(m);
      }
      if (found.empty()) fail("input pattern {} matches no corpus files ({})", in, kSupported);
    } else {
      fail("input {} does not exist", in);
    }
    files.insert(files.end(), found.begin(), found.end());
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

// ---- byte sources ---------------------------------------------------------------------------

namespace {

constexpr size_t kReadChunk = 4 << 20;

struct ByteSource {
  virtual ~ByteSource() = default;
  // Read up to n bytes; 0 means end of input. Throws Error on I/O or format errors.
  virtual size_t read(char* buf, size_t n) = 0;
};

struct PlainSource : ByteSource {
  std::string path;
  int fd = -1;
  int64_t* counter;
  explicit PlainSource(const std::string& p, int64_t* c = nullptr) : path(p), counter(c) {
    fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) fail("cannot open {}: {}", p, std::strerror(errno));
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  }
  ~PlainSource() override { if (fd >= 0) ::close(fd); }
  size_t read(char* buf, size_t n) override {
    for (;;) {
      ssize_t r = ::read(fd, buf, n);
      if (r >= 0) {
        if (counter) *counter += r;
        return size_t(r);
      }
      if (errno != EINTR) fail("cannot read {}: {}", path, std::strerror(errno));
    }
  }
};

struct ZstdSource : ByteSource {
  PlainSource raw;
  ZSTD_DStream* ds;
  std::vector<char> in;
  ZSTD_inBuffer ib{nullptr, 0, 0};
  bool eof = false;
  size_t last_ret = 0;  // 0 when the last frame was complete
  explicit ZstdSource(const std::string& p, int64_t* c) : raw(p, c), ds(ZSTD_createDStream()), in(ZSTD_DStreamInSize() * 8) {
    ZSTD_initDStream(ds);
    ib.src = in.data();
  }
  ~ZstdSource() override { ZSTD_freeDStream(ds); }
  size_t read(char* buf, size_t n) override {
    ZSTD_outBuffer ob{buf, n, 0};
    while (ob.pos == 0) {
      if (ib.pos == ib.size) {
        if (eof) break;
        size_t r = raw.read(in.data(), in.size());
        if (r == 0) { eof = true; break; }
        ib = {in.data(), r, 0};
      }
      size_t ret = ZSTD_decompressStream(ds, &ob, &ib);
      if (ZSTD_isError(ret)) fail("corrupt zstd data in {}: {}", raw.path, ZSTD_getErrorName(ret));
      last_ret = ret;
    }
    if (ob.pos == 0 && last_ret != 0) fail("truncated zstd stream in {}", raw.path);
    return ob.pos;
  }
};

struct GzipSource : ByteSource {
  std::string path;
  gzFile f;
  int64_t* counter;
  int64_t offset = 0;
  explicit GzipSource(const std::string& p, int64_t* c) : path(p), counter(c) {
    f = gzopen(p.c_str(), "rb");
    if (!f) fail("cannot open {}: {}", p, std::strerror(errno));
    gzbuffer(f, 1 << 20);
  }
  ~GzipSource() override { gzclose(f); }
  size_t read(char* buf, size_t n) override {
    int r = gzread(f, buf, unsigned(std::min<size_t>(n, 1u << 30)));
    int err = 0;
    const char* msg = gzerror(f, &err);
    if (r < 0 || (err != Z_OK && err != Z_STREAM_END))
      fail("corrupt or truncated gzip data in {}: {}", path, msg ? msg : "unknown error");
    if (counter) {
      int64_t off = int64_t(gzoffset(f));
      *counter += off - offset;
      offset = off;
    }
    return size_t(r);
  }
};

std::unique_ptr<ByteSource> open_source(const std::string& path, Compression c, int64_t* counter) {
  switch (c) {
    case Compression::zstd: return std::make_unique<ZstdSource>(path, counter);
    case Compression::gzip: return std::make_unique<GzipSource>(path, counter);
    default: return std::make_unique<PlainSource>(path, counter);
  }
}

std::string read_all(ByteSource& src) {
  std::string doc;
  for (;;) {
    size_t old = doc.size();
    doc.resize(old + kReadChunk);
    size_t r = src.read(doc.data() + old, kReadChunk);
    doc.resize(old + r);
    if (r == 0) return doc;
  }
}

}  // namespace

std::string read_corpus_file(const std::string& path, int64_t* input_bytes) {
  Compression c = ends_with(path, ".gz") ? Compression::gzip
                  : ends_with(path, ".zst") ? Compression::zstd : Compression::none;
  auto src = open_source(path, c, input_bytes);
  return read_all(*src);
}

// ---- JSON line scanner --------------------------------------------------------------------

namespace {

struct JsonScan {
  const char* p;
  const char* end;

  void ws() {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) ++p;
  }
  static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  bool hex4(uint32_t& v) {
    if (end - p < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) {
      int h = hexval(p[i]);
      if (h < 0) return false;
      v = v * 16 + uint32_t(h);
    }
    p += 4;
    return true;
  }
  static void put_utf8(std::string& o, uint32_t cp) {
    if (cp < 0x80) o += char(cp);
    else if (cp < 0x800) { o += char(0xC0 | (cp >> 6)); o += char(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
      o += char(0xE0 | (cp >> 12)); o += char(0x80 | ((cp >> 6) & 0x3F)); o += char(0x80 | (cp & 0x3F));
    } else {
      o += char(0xF0 | (cp >> 18)); o += char(0x80 | ((cp >> 12) & 0x3F));
      o += char(0x80 | ((cp >> 6) & 0x3F)); o += char(0x80 | (cp & 0x3F));
    }
  }
  // p at the opening quote. Appends the decoded string to *out when out != nullptr.
  // Lone UTF-16 surrogates in \u escapes decode to U+FFFD (they have no UTF-8 form).
  bool string(std::string* out) {
    ++p;
    for (;;) {
      const char* s = p;
      // 8 bytes at a time while none of them is a quote, a backslash or a control character.
      constexpr uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
      while (end - p >= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        uint64_t q = v ^ (ones * '"'), b = v ^ (ones * '\\');
        uint64_t hit = ((q - ones) & ~q) | ((b - ones) & ~b) | ((v - ones * 0x20) & ~v);
        if (hit & highs) break;
        p += 8;
      }
      while (p < end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) ++p;
      if (out) out->append(s, size_t(p - s));
      if (p >= end || (unsigned char)*p < 0x20) return false;
      if (*p == '"') { ++p; return true; }
      ++p;  // backslash
      if (p >= end) return false;
      char c = *p++;
      char lit;
      switch (c) {
        case '"': lit = '"'; break;
        case '\\': lit = '\\'; break;
        case '/': lit = '/'; break;
        case 'b': lit = '\b'; break;
        case 'f': lit = '\f'; break;
        case 'n': lit = '\n'; break;
        case 'r': lit = '\r'; break;
        case 't': lit = '\t'; break;
        case 'u': {
          uint32_t cp;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
              const char* save = p;
              p += 2;
              if (!hex4(lo)) return false;
              if (lo >= 0xDC00 && lo <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
              else { cp = 0xFFFD; p = save; }
            } else {
              cp = 0xFFFD;
            }
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            cp = 0xFFFD;
          }
          if (out) put_utf8(*out, cp);
          continue;
        }
        default: return false;
      }
      if (out) *out += lit;
    }
  }
  bool digits() {
    const char* s = p;
    while (p < end && *p >= '0' && *p <= '9') ++p;
    return p > s;
  }
  bool number() {
    if (p < end && *p == '-') ++p;
    if (p < end && *p == '0') ++p;
    else if (!digits()) return false;
    if (p < end && *p == '.') { ++p; if (!digits()) return false; }
    if (p < end && (*p == 'e' || *p == 'E')) {
      ++p;
      if (p < end && (*p == '+' || *p == '-')) ++p;
      if (!digits()) return false;
    }
    return true;
  }
  bool literal(std::string_view w) {
    if (size_t(end - p) < w.size() || std::string_view(p, w.size()) != w) return false;
    p += w.size();
    return true;
  }
  // Skip one value (validating it).
  bool value(int depth) {
    if (depth > 256 || p >= end) return false;
    switch (*p) {
      case '"': return string(nullptr);
      case '{': {
        ++p; ws();
        if (p < end && *p == '}') { ++p; return true; }
        for (;;) {
          ws();
          if (p >= end || *p != '"' || !string(nullptr)) return false;
          ws();
          if (p >= end || *p != ':') return false;
          ++p; ws();
          if (!value(depth + 1)) return false;
          ws();
          if (p < end && *p == ',') { ++p; continue; }
          if (p < end && *p == '}') { ++p; return true; }
          return false;
        }
      }
      case '[': {
        ++p; ws();
        if (p < end && *p == ']') { ++p; return true; }
        for (;;) {
          ws();
          if (!value(depth + 1)) return false;
          ws();
          if (p < end && *p == ',') { ++p; continue; }
          if (p < end && *p == ']') { ++p; return true; }
          return false;
        }
      }
      case 't': return literal("true");
      case 'f': return literal("false");
      case 'n': return literal("null");
      default: return number();
    }
  }
};

}  // namespace

JsonLineResult parse_jsonl_text(std::string_view line, std::string& text) {
  JsonScan s{line.data(), line.data() + line.size()};
  s.ws();
  if (s.p == s.end) return JsonLineResult::blank;
  if (*s.p != '{') return JsonLineResult::malformed;
  ++s.p;
  s.ws();
  bool have_text = false;
  std::string key;
  if (s.p < s.end && *s.p == '}') {
    ++s.p;
  } else {
    for (;;) {
      s.ws();
      key.clear();
      if (s.p >= s.end || *s.p != '"' || !s.string(&key)) return JsonLineResult::malformed;
      s.ws();
      if (s.p >= s.end || *s.p != ':') return JsonLineResult::malformed;
      ++s.p;
      s.ws();
      if (key == "text" && s.p < s.end && *s.p == '"') {
        text.clear();
        if (!s.string(&text)) return JsonLineResult::malformed;
        have_text = true;
      } else if (!s.value(1)) {
        return JsonLineResult::malformed;
      } else if (key == "text") {
        // A repeated key counts with its last value (as nlohmann::json reads it), so a later
        // "text" that is not a string makes the line malformed and a later string one fixes it.
        have_text = false;
      }
      s.ws();
      if (s.p < s.end && *s.p == ',') { ++s.p; continue; }
      if (s.p < s.end && *s.p == '}') { ++s.p; break; }
      return JsonLineResult::malformed;
    }
  }
  s.ws();
  if (s.p != s.end) return JsonLineResult::malformed;
  return have_text ? JsonLineResult::ok : JsonLineResult::malformed;
}

// ---- documents ------------------------------------------------------------------------------

// Returns false when fn asked to stop.
std::vector<std::string_view> cut_at_blank_lines(std::string_view text, size_t min_bytes) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.size();
    size_t from = start + std::max<size_t>(min_bytes, 2) - 2;
    if (from < text.size()) {
      size_t bl = text.find("\n\n", from);
      if (bl != std::string_view::npos) end = bl + 2;
    }
    out.push_back(text.substr(start, end - start));
    start = end;
  }
  return out;
}

static bool read_text_file(const std::string& path, Compression c,
                           const std::function<bool(std::string_view)>& fn, CorpusStats& st,
                           const CorpusOptions& opt) {
  auto src = open_source(path, c, &st.input_bytes);
  std::string doc = read_all(*src);
  if (opt.txt_doc_bytes == 0) {
    st.documents++;
    st.bytes += int64_t(doc.size());
    return fn(doc);
  }
  for (std::string_view piece : cut_at_blank_lines(doc, opt.txt_doc_bytes)) {
    st.documents++;
    st.bytes += int64_t(piece.size());
    if (!fn(piece)) return false;
  }
  return true;
}

static bool read_jsonl_file(const std::string& path, Compression c,
                            const std::function<bool(std::string_view)>& fn, CorpusStats& st) {
  auto src = open_source(path, c, &st.input_bytes);
  std::string buf(2 * kReadChunk, '\0');
  size_t begin = 0, filled = 0;
  int64_t line_no = 0;
  std::string text;
  bool at_eof = false;
  auto handle = [&](std::string_view line) -> bool {
    ++line_no;
    if (line_no == 1 && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);  // UTF-8 byte order mark
    JsonLineResult r = parse_jsonl_text(line, text);
    if (r == JsonLineResult::blank) return true;
    if (r == JsonLineResult::malformed) {
      st.malformed_lines++;
      if (st.first_malformed.empty()) st.first_malformed = fmt::format("{}:{}", path, line_no);
      st.malformed_per_file[path]++;
      return true;
    }
    st.documents++;
    st.bytes += int64_t(text.size());
    return fn(text);
  };
  for (;;) {
    // Hand out every complete line in the buffer.
    for (;;) {
      const char* nl = (const char*)std::memchr(buf.data() + begin, '\n', filled - begin);
      if (!nl) break;
      size_t len = size_t(nl - (buf.data() + begin));
      if (!handle(std::string_view(buf.data() + begin, len))) return false;
      begin += len + 1;
    }
    if (at_eof) {
      if (filled > begin && !handle(std::string_view(buf.data() + begin, filled - begin))) return false;
      return true;
    }
    // Move the partial line to the front and refill; grow for very long lines.
    if (begin > 0) {
      std::memmove(buf.data(), buf.data() + begin, filled - begin);
      filled -= begin;
      begin = 0;
    }
    if (buf.size() - filled < kReadChunk) buf.resize(std::max(buf.size() * 2, filled + kReadChunk));
    size_t r = src->read(buf.data() + filled, buf.size() - filled);
    if (r == 0) at_eof = true;
    filled += r;
  }
}

void for_each_document(const std::vector<std::string>& files,
                       const std::function<bool(std::string_view doc)>& fn, CorpusStats* stats) {
  for_each_document(files, fn, stats, CorpusOptions{});
}

void for_each_document(const std::vector<std::string>& files,
                       const std::function<bool(std::string_view doc)>& fn, CorpusStats* stats,
                       const CorpusOptions& opt) {
  CorpusStats local;
  CorpusStats& st = stats ? *stats : local;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& path = files[i];
    CorpusFileKind k = corpus_file_kind(path);
    if (k.compression == Compression::unsupported)
      fail("input {} has an unsupported extension (supported: {})", path, kSupported);
    if (k.parquet) {  // a run of Parquet files, decoded row groups ahead in parallel
      size_t j = i;
      while (j < files.size() && corpus_file_kind(files[j]).parquet) ++j;
      std::vector<std::string> run(files.begin() + std::ptrdiff_t(i), files.begin() + std::ptrdiff_t(j));
      int threads = opt.threads > 0 ? opt.threads : default_threads();
      if (!for_each_parquet_document(run, opt.text_column, fn, st, threads, ParquetLimits::from_env())) return;
      i = j - 1;
      continue;
    }
    st.files++;
    bool go = k.jsonl ? read_jsonl_file(path, k.compression, fn, st) : read_text_file(path, k.compression, fn, st, opt);
    if (!go) return;
  }
}

}  // namespace clm

// Tests for the corpus readers: input expansion, .txt/.jsonl/.jsonl.zst/.jsonl.gz documents,
// JSON escapes, malformed-line counting, truncated compressed files.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>

#include "core/common.h"
#include "data/corpus.h"

#include "test_data_util.h"

using namespace clm;
namespace fs = std::filesystem;

namespace {

using data_test::temp_dir;
using data_test::write_raw;
void write_zst(const fs::path& p, const std::string& s) {
  std::string out(ZSTD_compressBound(s.size()), '\0');
  size_t n = ZSTD_compress(out.data(), out.size(), s.data(), s.size(), 3);
  ASSERT_FALSE(ZSTD_isError(n));
  out.resize(n);
  write_raw(p, out);
}
void write_gz(const fs::path& p, const std::string& s) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_TRUE(f);
  gzwrite(f, s.data(), unsigned(s.size()));
  gzclose(f);
}

std::vector<std::string> read_all(const std::vector<std::string>& files, CorpusStats* st = nullptr) {
  std::vector<std::string> docs;
  for_each_document(files, [&](std::string_view d) { docs.emplace_back(d); return true; }, st);
  return docs;
}

}  // namespace

TEST(DataCorpus, JsonLineParser) {
  std::string t;
  EXPECT_EQ(parse_jsonl_text(R"({"id": 1, "text": "hello"})", t), JsonLineResult::ok);
  EXPECT_EQ(t, "hello");
  EXPECT_EQ(parse_jsonl_text(R"( {"text":"a\nb\t\"q\" \\ \/ \u00e9\ud83d\ude00","x":[1,-2.5e3,{"y":null}],"z":true} )", t),
            JsonLineResult::ok);
  EXPECT_EQ(t, "a\nb\t\"q\" \\ / \xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_EQ(parse_jsonl_text(R"({"text":"lone \ud800 x"})", t), JsonLineResult::ok);
  EXPECT_EQ(t, "lone \xEF\xBF\xBD x");
  EXPECT_EQ(parse_jsonl_text("   \r", t), JsonLineResult::blank);
  EXPECT_EQ(parse_jsonl_text("", t), JsonLineResult::blank);
  for (const char* bad : {R"({"text": "unterminated)", R"({"text": 5})", R"({"title": "no text"})",
                          R"(["text", "x"])", R"({"text": "a"} trailing)", R"({"text": "a",})",
                          R"({"text": "a", "n": 01})", R"({"text": "bad \q escape"})", "{\"text\": \"ctl\x01\"}",
                          R"({"text": "a", "v": tru})", R"({text: "a"})", "not json at all"})
    EXPECT_EQ(parse_jsonl_text(bad, t), JsonLineResult::malformed) << bad;
  // A repeated key counts with its last value, as nlohmann::json reads it (found by fuzzing).
  EXPECT_EQ(parse_jsonl_text(R"({"text": 5, "text": "last"})", t), JsonLineResult::ok);
  EXPECT_EQ(t, "last");
  EXPECT_EQ(parse_jsonl_text(R"({"text": "first", "text": null})", t), JsonLineResult::malformed);
}

TEST(DataCorpus, ReadsAllFormatsAndCountsMalformed) {
  auto d = temp_dir("corpus_formats");
  write_raw(d / "a.txt", "whole file\nis one document\n");
  write_raw(d / "b.jsonl", "\xEF\xBB\xBF{\"text\": \"b1\"}\n\n{\"text\": \"b2\"}\n{broken\n{\"text\": \"b3\"}");
  write_zst(d / "c.jsonl.zst", "{\"text\": \"c1\"}\n{\"text\": 7}\n{\"text\": \"c2\"}\n");
  write_gz(d / "d.jsonl.gz", "{\"text\": \"d1\"}\n{\"text\": \"d2\"}\n");
  write_raw(d / "ignored.md", "not a corpus file");
  fs::create_directories(d / ".hidden");
  write_raw(d / ".hidden" / "x.txt", "hidden");
  auto files = expand_inputs({d.string()});
  ASSERT_EQ(files.size(), 4u);
  CorpusStats st;
  auto docs = read_all(files, &st);
  std::vector<std::string> want = {"whole file\nis one document\n", "b1", "b2", "b3", "c1", "c2", "d1", "d2"};
  EXPECT_EQ(docs, want);
  EXPECT_EQ(st.files, 4);
  EXPECT_EQ(st.documents, 8);
  EXPECT_EQ(st.malformed_lines, 2);
  EXPECT_EQ(st.first_malformed, (d / "b.jsonl").string() + ":4");
  EXPECT_EQ(st.malformed_per_file[(d / "c.jsonl.zst").string()], 1);
  int64_t bytes = 0;
  for (auto& s : want) bytes += int64_t(s.size());
  EXPECT_EQ(st.bytes, bytes);
  fs::remove_all(d);
}

TEST(DataCorpus, ExpandInputs) {
  auto d = temp_dir("corpus_expand");
  fs::create_directories(d / "sub" / "deeper");
  write_raw(d / "x.jsonl", "");
  write_raw(d / "sub" / "y.txt", "y");
  write_raw(d / "sub" / "deeper" / "z.jsonl.zst", "");
  write_raw(d / "notes.md", "");
  auto all = expand_inputs({d.string()});
  EXPECT_EQ(all.size(), 3u);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  auto globbed = expand_inputs({(d / "*.jsonl").string(), (d / "x.jsonl").string()});
  ASSERT_EQ(globbed.size(), 1u);  // duplicates removed
  EXPECT_THROW(expand_inputs({(d / "missing.txt").string()}), Error);
  EXPECT_THROW(expand_inputs({(d / "*.parquet").string()}), Error);
  EXPECT_THROW(expand_inputs({(d / "notes.md").string()}), Error);
  fs::create_directories(d / "empty");
  EXPECT_THROW(expand_inputs({(d / "empty").string()}), Error);
  fs::remove_all(d);
}

TEST(DataCorpus, LongLinesAndEarlyStop) {
  auto d = temp_dir("corpus_long");
  std::string big(9 << 20, 'x');  // longer than the read buffer
  write_zst(d / "big.jsonl.zst", "{\"text\": \"" + big + "\"}\n{\"text\": \"after\"}\n{\"text\": \"third\"}\n");
  auto docs = read_all({(d / "big.jsonl.zst").string()});
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0], big);
  EXPECT_EQ(docs[1], "after");
  int seen = 0;
  for_each_document({(d / "big.jsonl.zst").string()}, [&](std::string_view) { return ++seen < 2; });
  EXPECT_EQ(seen, 2);
  fs::remove_all(d);
}

TEST(DataCorpus, TruncatedCompressedFilesAreErrors) {
  auto d = temp_dir("corpus_trunc");
  std::string text;
  for (int i = 0; i < 2000; ++i) text += fmt::format("{{\"text\": \"document number {}\"}}\n", i);
  write_zst(d / "t.jsonl.zst", text);
  write_gz(d / "t.jsonl.gz", text);
  for (const char* name : {"t.jsonl.zst", "t.jsonl.gz"}) {
    std::string full = read_file((d / name).string());
    write_raw(d / name, full.substr(0, full.size() / 2));
    try {
      read_all({(d / name).string()});
      ADD_FAILURE() << "no error for truncated " << name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  fs::remove_all(d);
}

TEST(DataCorpus, TxtFilesCutAtBlankLines) {
  std::string text = "para one\nline two\n\npara two\n\n\npara three is longer\n\nfour\n\nfive";
  for (size_t min : {1, 5, 12, 30, 1000}) {
    auto pieces = cut_at_blank_lines(text, min);
    std::string joined;
    for (size_t i = 0; i < pieces.size(); ++i) {
      joined += pieces[i];
      if (i + 1 < pieces.size()) {
        EXPECT_GE(pieces[i].size(), min);
        EXPECT_TRUE(pieces[i].ends_with("\n\n")) << pieces[i];
      }
    }
    EXPECT_EQ(joined, text) << "min " << min;
  }
  EXPECT_EQ(cut_at_blank_lines(text, 1000).size(), 1u);
  EXPECT_TRUE(cut_at_blank_lines("", 10).empty());
  auto d = temp_dir("corpus_txtcut");
  write_raw(d / "a.txt", text);
  CorpusOptions o;
  o.txt_doc_bytes = 12;
  CorpusStats st;
  std::vector<std::string> docs;
  for_each_document({(d / "a.txt").string()}, [&](std::string_view s) { docs.emplace_back(s); return true; }, &st, o);
  EXPECT_EQ(docs.size(), cut_at_blank_lines(text, 12).size());
  EXPECT_EQ(st.documents, int64_t(docs.size()));
  EXPECT_EQ(st.bytes, int64_t(text.size()));
  fs::remove_all(d);
}

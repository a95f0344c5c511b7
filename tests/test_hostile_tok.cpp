// Hostile tokenizer files against the real binary: every command that loads a tokenizer must
// answer a huge token, a pickle of millions of objects or a split pattern that matches the empty
// string with a one-line error within 1 GiB and 10 s, leave its input alone, and still load a
// real-size vocabulary (GPT-2's, also as a .tiktoken rank file) with the same ids.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_cli_util.h"
#include "test_hostile_util.h"
#include "tok/byte_level.h"
#include "tok/file_limits.h"

namespace fs = std::filesystem;

namespace {

// A fresh folder under /tmp, removed with everything in it.
struct TmpDir {
  fs::path path;
  TmpDir() {
    char tmpl[] = "/tmp/clocklm-hostile-tok-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TmpDir() { fs::remove_all(path); }
};

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

hostile::Outcome clocklm(const std::string& args) {
  return hostile::run_limited(cli_test::clocklm_binary() + " " + args);
}

std::string base64(std::string_view s) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((s.size() + 2) / 3 * 4);
  for (size_t i = 0; i < s.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(s[i])) << 16;
    if (i + 1 < s.size()) v |= uint32_t(uint8_t(s[i + 1])) << 8;
    if (i + 2 < s.size()) v |= uint32_t(uint8_t(s[i + 2]));
    out += abc[v >> 18];
    out += abc[(v >> 12) & 63];
    out += i + 1 < s.size() ? abc[(v >> 6) & 63] : '=';
    out += i + 2 < s.size() ? abc[v & 63] : '=';
  }
  return out;
}

// A .tiktoken rank file: the 256 single bytes at ranks 0..255, then `extra` at 256 on.
std::string tiktoken_file(const std::vector<std::string>& extra) {
  std::string out;
  for (int b = 0; b < 256; ++b) out += base64(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
  for (size_t i = 0; i < extra.size(); ++i) out += base64(extra[i]) + " " + std::to_string(256 + i) + "\n";
  return out;
}

// A pickled tiktoken Encoding as Python writes it (protocol 4, STACK_GLOBAL, NEWOBJ, BUILD): the
// 256 single bytes, `extra` from rank 256 on, the pattern and one special token <|bos|>.
std::string pickle_file(const std::string& pattern, const std::vector<std::string>& extra) {
  auto le = [](uint64_t v, int n) {
    std::string s;
    for (int k = 0; k < n; ++k) s += char((v >> (8 * k)) & 0xFF);
    return s;
  };
  auto str = [&](const std::string& s) { return "X" + le(s.size(), 4) + s; };
  auto bytes = [&](const std::string& s) { return "B" + le(s.size(), 4) + s; };
  auto num = [&](uint32_t v) { return "J" + le(v, 4); };
  std::string p = "\x80\x04";
  p += str("tiktoken.core") + str("Encoding") + "\x93)\x81}(";
  p += str("name") + str("hostile") + str("pat_str") + str(pattern) + str("mergeable_ranks") + "}(";
  for (int b = 0; b < 256; ++b) p += bytes(std::string(1, char(b))) + num(uint32_t(b));
  for (size_t i = 0; i < extra.size(); ++i) p += bytes(extra[i]) + num(uint32_t(256 + i));
  p += "u" + str("special_tokens") + "}" + str("<|bos|>") + num(uint32_t(256 + extra.size())) + "s";
  p += "ub.";
  return p;
}

// clocklm's own format: the 256 bytes, no merges, <|bos|>.
std::string clocklm_file(const std::string& pattern) {
  nlohmann::json j = {{"format", "clocklm-bpe"}, {"version", 1}, {"kind", "bpe"}, {"pattern", pattern},
                      {"vocab_size", 257}, {"bos", 256}, {"special_tokens", nlohmann::json::array({nlohmann::json::array({"<|bos|>", 256})})},
                      {"merges", nlohmann::json::array()}};
  for (int b = 0; b < 256; ++b) j["byte_ids"].push_back(b);
  return j.dump();
}

// A Hugging Face tokenizer.json: Split(pattern) then ByteLevel, the 256 byte tokens, no merges,
// and `added` added tokens (<|bos|> first) at ids 256 on, also listed in the vocab as Hugging Face
// writes them.
std::string hf_file(const std::string& pattern, size_t added = 1) {
  std::string vocab, adds;
  const clm::ByteLevel& bl = clm::byte_level();
  for (int b = 0; b < 256; ++b) vocab += (b ? "," : "") + nlohmann::json(bl.spell[b]).dump() + ":" + std::to_string(b);
  for (size_t i = 0; i < added; ++i) {
    std::string name = i ? "<|extra_" + std::to_string(i) + "|>" : "<|bos|>";
    vocab += ",\"" + name + "\":" + std::to_string(256 + i);
    adds += (i ? ",{\"id\":" : "{\"id\":") + std::to_string(256 + i) + ",\"content\":\"" + name + "\"}";
  }
  return "{\"model\":{\"type\":\"BPE\",\"vocab\":{" + vocab + "},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Sequence\","
         "\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":" + nlohmann::json(pattern).dump() +
         "},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"use_regex\":false}]},"
         "\"added_tokens\":[" + adds + "]}";
}

// Asserts a clean refusal whose line names `file` and contains `says`.
void expect_refused(const hostile::Outcome& o, const fs::path& file, const std::string& says) {
  EXPECT_CLEAN_REFUSAL(o);
  EXPECT_EQ(o.exit_code, 1) << o.out;
  EXPECT_NE(o.out.find("clocklm: error: "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(file.filename().string()), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(says), std::string::npos) << o.out;
}

// Runs the cheapest loading command (`tokenizer info`) and `prepare` on `file`, expecting each to
// refuse it with `says`, and the input folder to be left as it was.
void expect_every_loader_refuses(const TmpDir& dir, const fs::path& file, const std::string& extra_args,
                                 const std::string& says) {
  const fs::path text = dir.path / "in" / "text.txt";
  fs::create_directories(text.parent_path());
  hostile::write_file(text, "Some text to prepare.\n");
  const auto before = hostile::snapshot(file.parent_path());
  const auto before_in = hostile::snapshot(text.parent_path());
  hostile::Outcome info = clocklm("tokenizer info --tokenizer " + q(file) + extra_args);
  expect_refused(info, file, says);
  std::printf("  tokenizer info %s: exit %d, %.2f s, %ld MiB\n", file.filename().c_str(), info.exit_code,
              info.seconds, info.peak_rss_mib);
  hostile::Outcome prep = clocklm("prepare -q --input " + q(text) + " --tokenizer " + q(file) + extra_args +
                                  " --out " + q(dir.path / "out"));
  expect_refused(prep, file, says);
  std::printf("  prepare --tokenizer %s: exit %d, %.2f s, %ld MiB\n", file.filename().c_str(), prep.exit_code,
              prep.seconds, prep.peak_rss_mib);
  EXPECT_EQ(hostile::snapshot(file.parent_path()), before);
  EXPECT_EQ(hostile::snapshot(text.parent_path()), before_in);
}

const char* kTiktokenArgs = " --pattern clocklm --add-bos '<|bos|>'";

}  // namespace

TEST(HostileTok, TiktokenWithOneHugeTokenIsRefused) {
  TmpDir dir;
  const fs::path f = dir.path / "files" / "huge.tiktoken";
  fs::create_directories(f.parent_path());
  hostile::write_file(f, tiktoken_file({std::string(7'500'000, 'a')}));  // a 10 MB file
  ASSERT_GE(fs::file_size(f), 10'000'000u);
  expect_every_loader_refuses(dir, f, kTiktokenArgs, "longer than a token may be");
}

TEST(HostileTok, PickleWithOneHugeTokenIsRefused) {
  TmpDir dir;
  const fs::path f = dir.path / "files" / "tokenizer.pkl";
  fs::create_directories(f.parent_path());
  hostile::write_file(f, pickle_file(R"(\p{L}+|\p{N}+|\s+|[^\s\p{L}\p{N}]+)", {std::string(10'000'000, 'a')}));
  expect_every_loader_refuses(dir, f, "", "longer than a token may be");
}

TEST(HostileTok, PickleOfMillionsOfNonesIsRefused) {
  TmpDir dir;
  const fs::path f = dir.path / "files" / "tokenizer.pkl";
  fs::create_directories(f.parent_path());
  hostile::write_file(f, "\x80\x04" + std::string(30'000'000, 'N') + ".");
  expect_every_loader_refuses(dir, f, "", "objects and memo entries");
}

TEST(HostileTok, FileOverTheSizeLimitIsRefusedUnread) {
  TmpDir dir;
  const fs::path f = dir.path / "files" / "big.tiktoken";
  fs::create_directories(f.parent_path());
  {
    std::ofstream o(f, std::ios::binary);
    o << tiktoken_file({});
  }
  fs::resize_file(f, clm::kMaxTokenizerFileBytes + 1);  // sparse: no disk or time spent
  expect_every_loader_refuses(dir, f, kTiktokenArgs, "larger than a tokenizer file may be");
}

TEST(HostileTok, EmptyMatchPatternsAreRefusedInEveryFormat) {
  TmpDir dir;
  fs::create_directories(dir.path / "files");
  for (std::string pat : {"(?=a)", "", "\\b", "a|(?=b)"}) {
    SCOPED_TRACE("pattern '" + pat + "'");
    const fs::path cl = dir.path / "files" / "clocklm.json", hf = dir.path / "files" / "tokenizer.json",
                   pk = dir.path / "files" / "tokenizer.pkl", tt = dir.path / "files" / "ranks.tiktoken";
    hostile::write_file(cl, clocklm_file(pat));
    hostile::write_file(hf, hf_file(pat));
    hostile::write_file(pk, pickle_file(pat, {}));
    hostile::write_file(tt, tiktoken_file({}));
    expect_every_loader_refuses(dir, cl, "", "can match the empty string");
    expect_every_loader_refuses(dir, hf, "", "can match the empty string");
    expect_every_loader_refuses(dir, pk, "", "can match the empty string");
    // An empty --pattern means "from the file's name", so only the others can be given.
    if (!pat.empty())
      expect_every_loader_refuses(dir, tt, " --pattern '" + pat + "' --add-bos '<|bos|>'", "can match the empty string");
  }
}

namespace {

// `tokenizer info` loads the rank file f within the bounds and reports `vocab` ids.
void expect_rank_file_loads(const fs::path& f, int vocab) {
  hostile::Outcome o = clocklm("tokenizer info --tokenizer " + q(f) + kTiktokenArgs);
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("vocab_size " + std::to_string(vocab)), std::string::npos) << o.out;
  EXPECT_LE(o.peak_rss_mib, hostile::kMaxRssMiB);
  EXPECT_LE(o.seconds, hostile::kMaxSeconds);
  std::printf("  tokenizer info %s: %.2f s, %ld MiB\n", f.filename().c_str(), o.seconds, o.peak_rss_mib);
}

}  // namespace

TEST(HostileTok, LongTokensUnderTheLimitLoadInLinearTime) {
  // Each a^k is a^i + a^(k-i) for every i: 1.1 million merges from a 2 MB file, plus one token at
  // the length limit. Looking up every cut of every token took minutes here.
  TmpDir dir;
  const fs::path f = dir.path / "long.tiktoken";
  std::vector<std::string> extra;
  for (size_t k = 2; k <= 1500; ++k) extra.push_back(std::string(k, 'a'));
  extra.push_back(std::string(clm::kMaxTokenBytes, 'b'));
  hostile::write_file(f, tiktoken_file(extra));
  expect_rank_file_loads(f, 1757);
}

TEST(HostileTok, ManyTokensAtTheLengthLimitLoadInLinearTime) {
  // 120 random tokens of the longest length allowed (a 10 MB file): looking up every prefix and
  // suffix of each took about a minute here, walking them in sorted order takes milliseconds.
  TmpDir dir;
  const fs::path f = dir.path / "many.tiktoken";
  std::mt19937 rng(1);
  std::vector<std::string> extra(120, std::string(clm::kMaxTokenBytes, '\0'));
  for (auto& t : extra)
    for (char& c : t) c = char(rng());
  hostile::write_file(f, tiktoken_file(extra));
  expect_rank_file_loads(f, 377);
}

TEST(HostileTok, ManyAddedTokensLoadInLinearTime) {
  // Each added token that the vocab also lists was checked against every added token.
  TmpDir dir;
  const fs::path f = dir.path / "tokenizer.json";
  hostile::write_file(f, hf_file(R"(\p{L}+|\p{N}+|\s+|[^\s\p{L}\p{N}]+)", 200'000));
  hostile::Outcome o = clocklm("tokenizer info --tokenizer " + q(f));
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("vocab_size 200256"), std::string::npos) << o.out;
  EXPECT_LE(o.peak_rss_mib, hostile::kMaxRssMiB);
  EXPECT_LE(o.seconds, hostile::kMaxSeconds);
  std::printf("  tokenizer info (200000 added tokens): %.2f s, %ld MiB\n", o.seconds, o.peak_rss_mib);
}

TEST(HostileTok, RealGpt2VocabularyStillLoadsInEveryShape) {
  const fs::path gpt2 = fs::path(CLOCKLM_SOURCE_DIR) / ".." / "shared" / "data" / "tokenizers" / "gpt2";
  if (!fs::exists(gpt2 / "encoder.json")) GTEST_SKIP() << "no " << gpt2;
  TmpDir dir;
  // The same vocabulary as a tiktoken rank file (r50k_base is GPT-2's): ids are ranks.
  nlohmann::json enc = nlohmann::json::parse(std::ifstream(gpt2 / "encoder.json"));
  std::vector<std::string> by_id(enc.size());
  const clm::ByteLevel& bl = clm::byte_level();
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    if (it.key() == "<|endoftext|>") continue;
    ASSERT_TRUE(bl.decode(it.key(), by_id[it.value().get<size_t>()])) << it.key();
  }
  std::string ranks;
  for (size_t id = 0; id + 1 < by_id.size(); ++id) ranks += base64(by_id[id]) + " " + std::to_string(id) + "\n";
  const fs::path tt = dir.path / "r50k_base.tiktoken";
  hostile::write_file(tt, ranks);
  const fs::path sample = dir.path / "sample.txt";
  hostile::write_file(sample, "Hostile input, real vocabularies: GPT-2's 50,257 tokens load as before.\n"
                              "  Indented   text, numbers 1234567 and ünïcödé — all the same ids.\n");
  std::string ids[2];
  int k = 0;
  for (const fs::path& t : {gpt2, tt}) {
    hostile::Outcome info = clocklm("tokenizer info --tokenizer " + q(t));
    EXPECT_EQ(info.exit_code, 0) << info.out;
    EXPECT_NE(info.out.find("vocab_size 50257"), std::string::npos) << info.out;
    EXPECT_LE(info.peak_rss_mib, hostile::kMaxRssMiB);
    EXPECT_LE(info.seconds, hostile::kMaxSeconds);
    std::printf("  tokenizer info %s: %.2f s, %ld MiB\n", t.filename().c_str(), info.seconds, info.peak_rss_mib);
    hostile::Outcome e = hostile::run_limited(cli_test::clocklm_binary() + " tokenizer encode --tokenizer " + q(t),
                                              hostile::kMaxSeconds * 3, sample.string());
    EXPECT_EQ(e.exit_code, 0) << e.out;
    ids[k++] = e.out;
  }
  EXPECT_FALSE(ids[0].empty());
  EXPECT_EQ(ids[0], ids[1]);
}

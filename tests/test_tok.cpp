// Tokenizer tests: exact round trips (random bytes, scripts, emoji, invalid UTF-8, empty), known
// GPT-2 ids, the trainer (determinism, valid ranking, vocab size), token_bytes, the file format,
// parallel/batch encoding equal to serial, and the command line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <set>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_tok_util.h"
#include "tok/bpe.h"
#include "tok/tokenizer.h"
#include "tok/train.h"

using namespace clm;
using namespace tok_test;
namespace fs = std::filesystem;

namespace {

std::string training_text() {
  return shakespeare().substr(0, 600000) + varied_text(400000, 7) + random_bytes(20000, 8);
}

const Tokenizer& trained() {
  static Tokenizer t = [] {
    std::string text = training_text();
    std::vector<std::string_view> docs;
    for (size_t i = 0; i < text.size(); i += 50000) docs.push_back(std::string_view(text).substr(i, 50000));
    BpeTrainOptions opt;
    opt.vocab_size = 3000;
    return train_bpe(docs, opt);
  }();
  return t;
}

const Tokenizer& gpt2() {
  static Tokenizer t = Tokenizer::load(gpt2_dir());
  return t;
}

std::vector<std::string> round_trip_cases() {
  std::vector<std::string> c = {"", " ", "\n", "a", "Hello world", "  leading and trailing  ", "\r\n\r\n",
                                "日本語のテキスト", "Привет, мир!", "مرحبا بالعالم", "🙂🚀👩‍💻🇫🇷❤️",
                                "e\u0301 \u00a0\u2009\u3000 \u200b", "<|bos|> is just text here",
                                "<|endoftext|>", std::string(1000, ' '), std::string(500, 'z'),
                                "1234567890123456789", "don't I'm WE'LL it'S"};
  for (auto& s : invalid_utf8_cases()) c.push_back(s);
  for (int i = 0; i < 30; ++i) c.push_back(random_bytes(size_t(1 + i * 37), uint64_t(100 + i)));
  c.push_back(varied_text(50000, 3));
  return c;
}

void expect_round_trips(const Tokenizer& t) {
  for (const auto& s : round_trip_cases()) {
    auto ids = t.encode(s);
    EXPECT_EQ(t.decode(ids), s) << "round trip failed for a case of " << s.size() << " bytes";
    if (s.empty()) {
      EXPECT_TRUE(ids.empty());
    }
    for (uint32_t id : ids) ASSERT_LT(id, t.vocab_size());
  }
}

}  // namespace

TEST(Tok, RoundTripTrained) { expect_round_trips(trained()); }

TEST(Tok, RoundTripGpt2) {
  if (!have_gpt2()) GTEST_SKIP() << "no GPT-2 files under " << gpt2_dir();
  expect_round_trips(gpt2());
}

TEST(Tok, Gpt2KnownIds) {
  if (!have_gpt2()) GTEST_SKIP() << "no GPT-2 files under " << gpt2_dir();
  const Tokenizer& t = gpt2();
  EXPECT_EQ(t.vocab_size(), 50257u);
  EXPECT_EQ(t.bos_id(), 50256u);
  EXPECT_EQ(t.decode({50256}), "<|endoftext|>");
  EXPECT_EQ(t.encode("Hello world"), (std::vector<uint32_t>{15496, 995}));
  EXPECT_EQ(t.encode("Hello, world!"), (std::vector<uint32_t>{15496, 11, 995, 0}));
  EXPECT_EQ(t.encode(" the"), (std::vector<uint32_t>{262}));
  EXPECT_EQ(t.encode("\n\n"), (std::vector<uint32_t>{628}));
  EXPECT_EQ(t.encode(" "), (std::vector<uint32_t>{220}));
  EXPECT_EQ(t.token_bytes()[50256], 0u);
  EXPECT_EQ(t.token_bytes()[15496], 5u);  // "Hello"
}

TEST(Tok, TrainerVocabAndRanking) {
  const Tokenizer& t = trained();
  EXPECT_EQ(t.vocab_size(), 3000u);
  EXPECT_EQ(t.decode({t.bos_id()}), "<|bos|>");
  // Specials are the last 8 ids, and have token_bytes 0; every other id has >= 1 byte.
  for (uint32_t id = 0; id < t.vocab_size(); ++id) {
    bool special = id >= t.vocab_size() - 8;
    EXPECT_EQ(t.token_bytes()[id] == 0, special) << id;
  }
  // The saved merges form a valid ranking: merge r creates id 256 + r from ids that exist before it.
  auto dir = tok_test::temp_dir("clocklm_test_tok_rank");
  fs::create_directories(dir);
  t.save((dir / "tok.json").string());
  auto j = nlohmann::json::parse(read_file((dir / "tok.json").string()));
  const auto& merges = j.at("merges");
  ASSERT_EQ(merges.size(), 3000u - 256 - 8);
  std::set<std::pair<uint32_t, uint32_t>> seen;
  for (size_t r = 0; r < merges.size(); ++r) {
    uint32_t a = merges[r][0], b = merges[r][1], c = merges[r][2];
    EXPECT_EQ(c, 256 + r);
    EXPECT_LT(a, c);
    EXPECT_LT(b, c);
    EXPECT_TRUE(seen.insert({a, b}).second) << "duplicate merge at rank " << r;
  }
  fs::remove_all(dir);
}

TEST(Tok, TrainerDeterministic) {
  std::string text = varied_text(300000, 11) + shakespeare().substr(0, 200000);
  std::vector<std::string_view> docs;
  for (size_t i = 0; i < text.size(); i += 7000) docs.push_back(std::string_view(text).substr(i, 7000));
  BpeTrainOptions opt;
  opt.vocab_size = 1500;
  opt.threads = 1;
  Tokenizer a = train_bpe(docs, opt);
  Tokenizer b = train_bpe(docs, opt);
  opt.threads = 2;
  Tokenizer c = train_bpe(docs, opt);
  std::reverse(docs.begin(), docs.end());  // pair counts do not depend on document order
  Tokenizer d = train_bpe(docs, opt);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.hash(), c.hash());
  EXPECT_EQ(a.hash(), d.hash());
  // A different vocab size gives a different tokenizer whose merges are a prefix-compatible ranking.
  opt.vocab_size = 1400;
  Tokenizer e = train_bpe(docs, opt);
  EXPECT_NE(a.hash(), e.hash());
  EXPECT_EQ(e.vocab_size(), 1400u);
  for (uint32_t id = 256; id < 1400 - 8; ++id) EXPECT_EQ(e.decode({id}), a.decode({id})) << id;
}

TEST(Tok, TrainerSmallInputsAndLimits) {
  BpeTrainOptions opt;
  opt.vocab_size = 1000;
  // Too little text for 1000 ids: the trainer stops when no pair is left, never exceeding the size.
  Tokenizer t = train_bpe({"abab abab", "ab"}, opt);
  EXPECT_LE(t.vocab_size(), 1000u);
  EXPECT_EQ(t.decode(t.encode("abab abab xyz")), "abab abab xyz");
  // max_chars caps the text used: only "aaaa" (4 bytes) is seen, so "bbbb" gets no merges.
  opt.max_chars = 4;
  Tokenizer m = train_bpe({"aaaa", "bbbbbbbbbbbb"}, opt);
  EXPECT_EQ(m.encode("bbbb").size(), 4u);
  EXPECT_EQ(m.encode("aaaa").size(), 1u);
  opt.vocab_size = 100;
  EXPECT_THROW(train_bpe({"x"}, opt), Error);
  // Empty input still yields a usable byte-level tokenizer.
  opt.vocab_size = 300;
  Tokenizer e = train_bpe({}, opt);
  EXPECT_EQ(e.vocab_size(), 256u + 8);
  EXPECT_EQ(e.decode(e.encode("\xff x")), "\xff x");
}

TEST(Tok, TokenBytesSumToDecodedLength) {
  for (const Tokenizer* t : {&trained(), have_gpt2() ? &gpt2() : &trained()}) {
    Rng rng(5);
    uint32_t n_special = 0;
    for (uint32_t b : t->token_bytes()) n_special += b == 0;
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<uint32_t> ids;
      size_t n = rng.next() % 300;
      uint64_t sum = 0;
      for (size_t i = 0; i < n; ++i) {
        uint32_t id;
        do id = uint32_t(rng.next() % t->vocab_size());
        while (t->token_bytes()[id] == 0);
        ids.push_back(id);
        sum += t->token_bytes()[id];
      }
      EXPECT_EQ(sum, t->decode(ids).size());
    }
    // And on real encodings.
    std::string s = varied_text(20000, 9);
    uint64_t sum = 0;
    for (uint32_t id : t->encode(s)) sum += t->token_bytes()[id];
    EXPECT_EQ(sum, s.size());
    EXPECT_GE(n_special, 1u);
  }
}

TEST(Tok, SaveLoadFileFolderAndGpt2) {
  auto dir = tok_test::temp_dir("clocklm_test_tok_save");
  fs::remove_all(dir);
  fs::create_directories(dir / "folder");
  const Tokenizer& t = trained();
  t.save((dir / "t.json").string());
  t.save((dir / "folder").string());  // a folder: writes folder/tokenizer.json
  ASSERT_TRUE(fs::exists(dir / "folder" / "tokenizer.json"));
  Tokenizer a = Tokenizer::load((dir / "t.json").string());
  Tokenizer b = Tokenizer::load((dir / "folder").string());
  EXPECT_EQ(a.hash(), t.hash());
  EXPECT_EQ(b.hash(), t.hash());
  std::string s = varied_text(30000, 21);
  EXPECT_EQ(a.encode(s), t.encode(s));
  EXPECT_EQ(a.token_bytes(), t.token_bytes());
  if (have_gpt2()) {
    // GPT-2 saved in clocklm's format loads back to the same ids and hash.
    gpt2().save((dir / "gpt2.json").string());
    Tokenizer g = Tokenizer::load((dir / "gpt2.json").string());
    EXPECT_EQ(g.hash(), gpt2().hash());
    EXPECT_EQ(g.encode(s), gpt2().encode(s));
    EXPECT_EQ(g.bos_id(), 50256u);
    EXPECT_EQ(Tokenizer::load(gpt2_dir() + "/encoder.json").hash(), gpt2().hash());
  }
  fs::remove_all(dir);
}

TEST(Tok, LoadErrors) {
  auto dir = tok_test::temp_dir("clocklm_test_tok_err");
  fs::remove_all(dir);
  fs::create_directories(dir / "empty");
  EXPECT_THROW(Tokenizer::load((dir / "missing.json").string()), Error);
  EXPECT_THROW(Tokenizer::load((dir / "empty").string()), Error);
  atomic_write((dir / "bad.json").string(), "{ not json");
  EXPECT_THROW(Tokenizer::load((dir / "bad.json").string()), Error);
  atomic_write((dir / "other.json").string(), R"({"format": "something-else"})");
  EXPECT_THROW(Tokenizer::load((dir / "other.json").string()), Error);
  // A merge that uses an id defined only later is refused.
  trained().save((dir / "t.json").string());
  auto j = nlohmann::json::parse(read_file((dir / "t.json").string()));
  j["merges"][0][0] = 2000;
  atomic_write((dir / "broken.json").string(), j.dump());
  EXPECT_THROW(Tokenizer::load((dir / "broken.json").string()), Error);
  auto k = nlohmann::json::parse(read_file((dir / "t.json").string()));
  k["pattern"] = "(unclosed";
  atomic_write((dir / "badre.json").string(), k.dump());
  EXPECT_THROW(Tokenizer::load((dir / "badre.json").string()), Error);
  EXPECT_THROW(trained().decode({trained().vocab_size()}), Error);
  try {
    Tokenizer::load((dir / "missing.json").string());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.json"), std::string::npos);
  }
  fs::remove_all(dir);
}

// encode() of a large text is cut at safe points and encoded in parallel; it must equal serial
// encoding. The text has many whitespace runs before newlines, where a careless cut would differ.
TEST(Tok, ParallelAndBatchEqualSerial) {
  std::string big = varied_text(2'600'000, 33);
  std::vector<const Tokenizer*> toks = {&trained()};
  if (have_gpt2()) toks.push_back(&gpt2());
  for (const Tokenizer* t : toks) {
    setenv("CLOCKLM_THREADS", "1", 1);
    auto serial = t->encode(big);
    setenv("CLOCKLM_THREADS", "2", 1);
    auto parallel = t->encode(big);
    unsetenv("CLOCKLM_THREADS");
    EXPECT_EQ(serial, parallel);
    std::vector<std::string_view> docs;
    for (size_t i = 0; i < 200000; i += 1000 + i % 777) docs.push_back(std::string_view(big).substr(i, 1000 + i % 777));
    auto batch = t->encode_batch(docs);
    ASSERT_EQ(batch.size(), docs.size());
    for (size_t i = 0; i < docs.size(); ++i) EXPECT_EQ(batch[i], t->encode(docs[i])) << i;
  }
}

TEST(Tok, CommandLine) {
  if (!have_gpt2()) GTEST_SKIP() << "no GPT-2 files under " << gpt2_dir();
  auto dir = tok_test::temp_dir("clocklm_test_tok_cli");
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string bin = CLOCKLM_BINARY, d = dir.string();
  atomic_write(d + "/in.txt", "Hello world");
  ASSERT_EQ(std::system((bin + " tokenizer encode --tokenizer " + gpt2_dir() + " < " + d + "/in.txt > " + d +
                         "/ids.txt").c_str()), 0);
  EXPECT_EQ(read_file(d + "/ids.txt"), "15496 995\n");
  ASSERT_EQ(std::system((bin + " tokenizer decode --tokenizer " + gpt2_dir() + " < " + d + "/ids.txt > " + d +
                         "/out.txt").c_str()), 0);
  EXPECT_EQ(read_file(d + "/out.txt"), "Hello world");
  // Train on a small file, then round-trip arbitrary bytes through the CLI.
  atomic_write(d + "/train.txt", varied_text(100000, 4));
  ASSERT_EQ(std::system((bin + " tokenizer train --input " + d + "/train.txt --vocab-size 600 --out " + d +
                         "/tok.json > /dev/null 2>&1").c_str()), 0);
  EXPECT_EQ(Tokenizer::load(d + "/tok.json").vocab_size(), 600u);
  std::string bytes = random_bytes(5000, 77) + varied_text(5000, 78);
  atomic_write(d + "/bytes.bin", bytes);
  ASSERT_EQ(std::system((bin + " tokenizer encode --tokenizer " + d + "/tok.json < " + d + "/bytes.bin | " + bin +
                         " tokenizer decode --tokenizer " + d + "/tok.json > " + d + "/rt.bin").c_str()), 0);
  EXPECT_EQ(read_file(d + "/rt.bin"), bytes);
  // Bad input: a clear error and a non-zero exit.
  atomic_write(d + "/badids.txt", "1 2 x3");
  EXPECT_NE(std::system((bin + " tokenizer decode --tokenizer " + gpt2_dir() + " < " + d + "/badids.txt > /dev/null 2> " +
                         d + "/err.txt").c_str()), 0);
  EXPECT_NE(read_file(d + "/err.txt").find("clocklm: error: malformed token id"), std::string::npos);
  EXPECT_NE(std::system((bin + " tokenizer encode --tokenizer " + d + "/nope < /dev/null > /dev/null 2>&1").c_str()), 0);
  fs::remove_all(dir);
}

// The ASCII fast paths of the pre-split must give exactly PCRE2's chunks. Random short strings from
// an alphabet of the characters each alternative of the two patterns cares about.
TEST(Tok, PreSplitFastPathEqualsPcre2) {
  const std::vector<std::string> alphabet = {
      "a", "Z", "s", "S", "l", "L", "e", "E", "v", "r", "d", "m", "t", "T", "k", "0", "9", "'", "'", " ",
      " ", "  ", "\t", "\n", "\r", "\v", "\f", "\x1c", "\x1f", "\x7f", ".", "!", "_", "-", "\"", "é", "ſ",
      "\u212a", "\u00a0", "\u0085", "\u2028", "\u3000", "٣", "字", "🙂", "\u0301", "\x80", "\xff"};
  for (const char* pattern : {kGpt4Pattern, kGpt2Pattern}) {
    PreSplitter fast(pattern), slow(pattern, /*allow_fast_path=*/false);
    ASSERT_NE(fast.fast, 0);
    ASSERT_EQ(slow.fast, 0);
    SplitScratch fs_(fast), ss_(slow);
    Rng rng(42);
    for (int trial = 0; trial < 20000; ++trial) {
      std::string s;
      size_t len = rng.next() % 24;
      for (size_t i = 0; i < len; ++i) s += alphabet[rng.next() % alphabet.size()];
      std::vector<std::string> a, b;
      pre_split(fs_, s, [&](std::string_view c) { a.emplace_back(c); });
      pre_split(ss_, s, [&](std::string_view c) { b.emplace_back(c); });
      ASSERT_EQ(a, b) << "pattern " << pattern << " differs on a string of " << s.size() << " bytes";
    }
  }
}

// Sizes in a tokenizer file are checked against the file's own content before any table is sized
// from them: a declared vocabulary that the lists do not fill, merges whose texts double in length
// with every merge (a few dozen would spell terabytes), ids that are not integers of the right
// range, and GPT-2 ids beyond the entry count.
TEST(Tok, AbsurdSizesAreRefusedBeforeAllocating) {
  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  nlohmann::json base = {{"format", "clocklm-bpe"}, {"version", 1}, {"kind", "bpe"}, {"pattern", kGpt4Pattern},
                         {"vocab_size", 257}, {"bos", 256}, {"merges", nlohmann::json::array()}};
  base["special_tokens"] = nlohmann::json::array({nlohmann::json::array({"<|bos|>", 256})});
  base["byte_ids"] = nlohmann::json::array();
  for (int b = 0; b < 256; ++b) base["byte_ids"].push_back(b);
  EXPECT_EQ(error_of([&] { Tokenizer::from_json(base.dump(), "t.json"); }), "(no error)");
  auto j = base;
  j["vocab_size"] = 4000000000u;
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); }).find("does not match"), std::string::npos);
  j = base;
  j["bos"] = 1e300;  // a float where an id belongs
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); }).find("bos must be an integer"),
            std::string::npos);
  // Merge r joins id 255+r with itself: the text doubles each time, 2^60 bytes after 60 merges.
  j = base;
  j["merges"].push_back({97, 97, 257});
  for (uint32_t r = 1; r < 60; ++r) j["merges"].push_back({256 + r, 256 + r, 257 + r});
  j["vocab_size"] = 257 + 60;
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j.dump(), "t.json"); }).find("more than"), std::string::npos);
  // GPT-2: an id far beyond the number of entries.
  nlohmann::json enc = {{"a", 0}, {"<|endoftext|>", 4000000000u}};
  EXPECT_NE(error_of([&] { parse_gpt2(enc.dump(), "#version: 0.2\n", "gpt2"); }).find("not a number below 2"),
            std::string::npos);
}

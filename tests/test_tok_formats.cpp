// Tokenizers of other formats against their reference libraries: the same varied text encoded by
// clocklm and by @huggingface/tokenizers (tokenizer.json) or the tiktoken npm package (tiktoken's
// Rust core) gives identical ids, for GPT-2's tokenizer.json and a Llama-3-style Split+ByteLevel
// one (both written by tests/clients/tokenizer_ref.mjs, not by clocklm), clocklm's own tokenizer
// exported as tokenizer.json, tiktoken's cl100k_base rank file, and a nanochat-style pickled
// Encoding (tests/data/tokenizers, made by make_nanochat_pkl.py). Skipped with the reason when node
// or the packages are missing. Then the BOS choice, and bad inputs: one-line errors, nothing written.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_cli_util.h"
#include "test_tok_util.h"
#include "tok/bpe.h"
#include "tok/hf_json.h"
#include "tok/tiktoken.h"
#include "tok/tokenizer.h"
#include "tok/train.h"

using namespace clm;
using namespace tok_test;
namespace fs = std::filesystem;

namespace {

std::string source(const std::string& rel) { return std::string(CLOCKLM_SOURCE_DIR) + "/" + rel; }
std::string fixture(const std::string& name) { return source("tests/data/tokenizers/" + name); }

// Why the reference clients cannot run here, or "".
std::string clients_missing() {
  if (cli_test::run_cmd("node --version").status != 0) return "node is not installed";
  for (const char* pkg : {"@huggingface/tokenizers", "tiktoken"})
    if (!fs::exists(source(std::string("tests/clients/node_modules/") + pkg + "/package.json")))
      return std::string("tests/clients/node_modules lacks ") + pkg + " (run npm ci in tests/clients)";
  return "";
}

#define NEED_CLIENTS()                                   \
  do {                                                   \
    std::string why = clients_missing();                 \
    if (!why.empty()) GTEST_SKIP() << "SKIP: " << why;  \
  } while (0)

// The reference script; fails the test (and returns false) when it does not succeed.
bool run_ref(const std::string& args) {
  auto r = cli_test::run_cmd("node " + source("tests/clients/tokenizer_ref.mjs") + " " + args);
  EXPECT_EQ(r.status, 0) << args << "\n" << r.out;
  return r.status == 0;
}

// A shell word.
std::string q(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Valid UTF-8 texts of every kind: prose, code, numbers, whitespace runs, accents, CJK, emoji.
std::vector<std::string> texts() {
  std::vector<std::string> t = {
      "Hello world",
      "It's a naïve café; don't we'll they've I'M. Größe straße ſ K",
      "int main(int argc, char** argv) {\n    for (int i = 0; i < 10; ++i) x += a[i] * 3.14159;\n\treturn 0;\n}\n",
      "def f(x):\n    return {'a': [1, 2, 3], \"b\": None}  # comment\n\n\n",
      "1 12 123 1234 12345 123456789 3.14 1,000,000 $19.99 100% 0x1F 2024-01-01",
      "   leading spaces and trailing   \n\n\n   \t\t  mixed \r\n windows\r\n\r\n",
      "日本語のテキスト、東京。中文汉字，한국어 서울. Привет, мир! Ελληνικά λόγος. العربية مرحبا עברית",
      "emoji 🙂🚀 👩‍💻 🇫🇷 ❤️ x² ½ Ⅻ ٣٤٥ १२३ e\u0301 Ṁ̇",
      "non-breaking\u00a0space thin\u2009space ideographic\u3000space zero\u200bwidth line\u2028sep",
      "                                                                                    x",
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
      "!!!!!!!!!!????....,,,,;;;;::::====++++----____****", "\n", " ", "",
  };
  t.push_back(shakespeare().substr(0, 20000));
  for (uint64_t seed = 1; seed <= 12; ++seed) t.push_back(varied_text(size_t(50 + seed * seed * 150), seed));
  return t;
}

// Writes the texts for the script and reads back its ids.
struct RefRun {
  fs::path dir;
  std::vector<std::string> in = texts();
  explicit RefRun(const std::string& name) : dir(temp_dir("clocklm_test_tokfmt_" + name)) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    atomic_write((dir / "texts.json").string(), nlohmann::json(in).dump());
  }
  ~RefRun() { fs::remove_all(dir); }
  std::string texts_path() const { return q((dir / "texts.json").string()); }
  std::string out_path() const { return q((dir / "ids.json").string()); }
  std::vector<std::vector<uint32_t>> ids() const {
    return nlohmann::json::parse(read_file((dir / "ids.json").string())).get<std::vector<std::vector<uint32_t>>>();
  }
  // clocklm's ids for every text equal the reference's.
  void expect_same(const Tokenizer& t, const std::string& what) const {
    auto want = ids();
    ASSERT_EQ(want.size(), in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      auto got = t.encode(in[i]);
      if (got != want[i]) {
        size_t k = 0;
        while (k < got.size() && k < want[i].size() && got[k] == want[i][k]) ++k;
        auto piece = [&](const std::vector<uint32_t>& v) {
          std::vector<uint32_t> w(v.begin() + long(k), v.begin() + long(std::min(v.size(), k + 4)));
          return nlohmann::json(t.decode(w)).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
        };
        ADD_FAILURE() << what << ": text " << i << " differs at token " << k << ": clocklm " << piece(got)
                      << " vs reference " << piece(want[i]);
      }
      EXPECT_EQ(t.decode(got), in[i]) << what;
    }
  }
};

// Exact round trip and token byte lengths on any bytes, invalid UTF-8 included (the references
// take only Unicode text, so this is clocklm's own rule: invalid runs are chunks of their own).
void expect_exact_bytes(const Tokenizer& t) {
  for (const std::string& s : invalid_utf8_cases()) {
    auto ids = t.encode(s);
    EXPECT_EQ(t.decode(ids), s);
    uint64_t n = 0;
    for (uint32_t id : ids) n += t.token_bytes()[id];
    EXPECT_EQ(n, s.size());
  }
  std::string r = random_bytes(5000, 7);
  EXPECT_EQ(t.decode(t.encode(r)), r);
}

const Tokenizer& small_trained() {
  static Tokenizer t = [] {
    std::string text = shakespeare().substr(0, 300000) + varied_text(200000, 5);
    BpeTrainOptions o;
    o.vocab_size = 3000;
    return train_bpe({std::string_view(text)}, o);
  }();
  return t;
}

}  // namespace

TEST(TokFormats, Gpt2TokenizerJsonWrittenByNode) {
  NEED_CLIENTS();
  if (!have_gpt2()) GTEST_SKIP() << "no GPT-2 files under " << gpt2_dir();
  RefRun run("gpt2");
  // The JavaScript library's ByteLevel regex uses JavaScript's \s, which lacks U+0085 (NEL), unlike
  // Hugging Face's Rust library, GPT-2's own regex and clocklm (Unicode White_Space): NEL is left
  // out of this comparison (the Split-based ones below keep it).
  for (std::string& s : run.in)
    for (size_t k; (k = s.find("\u0085")) != std::string::npos;) s.replace(k, 2, " ");
  atomic_write((run.dir / "texts.json").string(), nlohmann::json(run.in).dump());
  std::string tj = (run.dir / "tokenizer.json").string();
  ASSERT_TRUE(run_ref("gpt2-json " + q(gpt2_dir() + "/encoder.json") + " " + q(gpt2_dir() + "/vocab.bpe") + " " + q(tj)));
  ASSERT_TRUE(run_ref("hf " + q(tj) + " " + run.texts_path() + " " + run.out_path()));
  Tokenizer t = Tokenizer::load(tj);
  EXPECT_EQ(t.kind(), "hf");
  EXPECT_EQ(t.vocab_size(), 50257u);
  EXPECT_EQ(t.bos_name(), "<|endoftext|>");
  run.expect_same(t, "GPT-2 tokenizer.json");
  // The same ids as GPT-2's own files.
  Tokenizer g = Tokenizer::load(gpt2_dir());
  for (const std::string& s : run.in) EXPECT_EQ(t.encode(s), g.encode(s));
  expect_exact_bytes(t);
  // The folder form.
  EXPECT_EQ(Tokenizer::load(run.dir.string()).hash(), t.hash());
}

TEST(TokFormats, Llama3StyleSplitByteLevelWrittenByNode) {
  NEED_CLIENTS();
  if (!have_gpt2()) GTEST_SKIP() << "no GPT-2 files under " << gpt2_dir();
  RefRun run("llama3");
  std::string tj = (run.dir / "tokenizer.json").string();
  ASSERT_TRUE(run_ref("gpt2-json " + q(gpt2_dir() + "/encoder.json") + " " + q(gpt2_dir() + "/vocab.bpe") + " " + q(tj) +
                  " llama3"));
  ASSERT_TRUE(run_ref("hf " + q(tj) + " " + run.texts_path() + " " + run.out_path()));
  Tokenizer t = Tokenizer::load(tj);
  run.expect_same(t, "Llama-3-style tokenizer.json");
  expect_exact_bytes(t);
}

TEST(TokFormats, ClocklmTokenizerExportedAsHfJson) {
  NEED_CLIENTS();
  RefRun run("export");
  const Tokenizer& t = small_trained();
  write_hf_tokenizer(t, (run.dir / "hf").string());
  ASSERT_TRUE(fs::exists(run.dir / "hf" / "tokenizer_config.json"));
  std::string tj = (run.dir / "hf" / "tokenizer.json").string();
  ASSERT_TRUE(run_ref("hf " + q(tj) + " " + run.texts_path() + " " + run.out_path()));
  run.expect_same(t, "clocklm tokenizer as the reference reads its export");
  // Read back by clocklm: the same ids and specials, BOS included.
  Tokenizer back = Tokenizer::load(tj);
  EXPECT_EQ(back.kind(), "hf");
  EXPECT_EQ(back.bos_id(), t.bos_id());
  EXPECT_EQ(back.token_bytes(), t.token_bytes());
  run.expect_same(back, "exported tokenizer.json read back");
  // Split on a literal string: the text between matches, which the pattern does not match, is a
  // chunk of its own in both.
  auto j = nlohmann::json::parse(read_file(tj));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", ", "}};
  atomic_write((run.dir / "string.json").string(), j.dump());
  ASSERT_TRUE(run_ref("hf " + q((run.dir / "string.json").string()) + " " + run.texts_path() + " " + run.out_path()));
  run.expect_same(Tokenizer::load((run.dir / "string.json").string()), "Split on a string");
  if (have_gpt2()) {  // GPT-2 exported too
    Tokenizer g = Tokenizer::load(gpt2_dir());
    write_hf_tokenizer(g, (run.dir / "g").string());
    ASSERT_TRUE(run_ref("hf " + q((run.dir / "g" / "tokenizer.json").string()) + " " + run.texts_path() + " " +
                    run.out_path()));
    run.expect_same(g, "GPT-2 exported as tokenizer.json");
  }
}

TEST(TokFormats, Cl100kRankFileFromTheTiktokenPackage) {
  NEED_CLIENTS();
  RefRun run("cl100k");
  std::string rf = (run.dir / "cl100k_base.tiktoken").string();
  ASSERT_TRUE(run_ref("write-ranks cl100k_base " + q(rf)));
  ASSERT_TRUE(run_ref("tiktoken-named cl100k_base " + run.texts_path() + " " + run.out_path()));
  Tokenizer t = Tokenizer::load(rf);  // the pattern and special tokens from the file's name
  EXPECT_EQ(t.kind(), "tiktoken");
  EXPECT_EQ(t.vocab_size(), 100277u);
  EXPECT_EQ(t.bos_name(), "<|endoftext|>");
  EXPECT_EQ(t.bos_id(), 100257u);
  run.expect_same(t, "cl100k_base");
  expect_exact_bytes(t);
  // Exported as tokenizer.json, the reference library encodes it the same.
  write_hf_tokenizer(t, (run.dir / "hf").string());
  ASSERT_TRUE(run_ref("hf " + q((run.dir / "hf" / "tokenizer.json").string()) + " " + run.texts_path() + " " +
                  run.out_path()));
  run.expect_same(t, "cl100k_base exported as tokenizer.json");
}

TEST(TokFormats, NanochatPickleAndRankFile) {
  NEED_CLIENTS();
  RefRun run("nanochat");
  nlohmann::json specials = nlohmann::json::object();
  Tokenizer pkl = Tokenizer::load(fixture("nanochat_tokenizer.pkl"));
  for (auto& [name, id] : pkl.special_tokens()) specials[name] = id;
  ASSERT_TRUE(run_ref("tiktoken " + q(fixture("nanochat_tokenizer.tiktoken")) + " " + q(kGpt4Pattern) + " " +
                  q(specials.dump()) + " " + run.texts_path() + " " + run.out_path()));
  EXPECT_EQ(pkl.kind(), "tiktoken");
  EXPECT_EQ(pkl.vocab_size(), 2009u);
  EXPECT_EQ(pkl.bos_name(), "<|bos|>");
  EXPECT_EQ(pkl.bos_id(), 2000u);
  run.expect_same(pkl, "nanochat tokenizer.pkl");
  expect_exact_bytes(pkl);
  // Protocol 3, and the rank file with the pattern and special tokens as options: the same tokenizer.
  EXPECT_EQ(Tokenizer::load(fixture("nanochat_tokenizer_p3.pkl")).hash(), pkl.hash());
  TokenizerOptions o;
  o.pattern = "clocklm";
  o.specials = pkl.special_tokens();
  EXPECT_EQ(Tokenizer::load(fixture("nanochat_tokenizer.tiktoken"), o).hash(), pkl.hash());
}

namespace {

// The one-line error of f, or "" if it succeeds.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_REFUSED(expr, needle)                                              \
  do {                                                                            \
    std::string e_ = error_of([&] { (void)(expr); });                             \
    EXPECT_NE(e_.find(needle), std::string::npos) << "error: '" << e_ << "'";   \
    EXPECT_EQ(e_.find('\n'), std::string::npos) << e_;                           \
  } while (0)

nlohmann::json hf_base() { return nlohmann::json::parse(hf_tokenizer_json(small_trained())); }
Tokenizer hf(const nlohmann::json& j, const TokenizerOptions& o = {}) { return parse_hf_tokenizer(j, "t.json", o); }

}  // namespace

TEST(TokFormats, HfUnsupportedComponentsAreRefusedByName) {
  using nlohmann::json;
  EXPECT_NO_THROW(hf(hf_base()));
  auto with = [](auto&& edit) {
    json j = hf_base();
    edit(j);
    return j;
  };
  EXPECT_REFUSED(hf(with([](json& j) { j["normalizer"] = {{"type", "NFC"}}; })), "normalizer NFC");
  EXPECT_REFUSED(hf(with([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; })), "pre-tokenizer Metaspace");
  EXPECT_REFUSED(hf(with([](json& j) { j["pre_tokenizer"] = nullptr; })), "no pre-tokenizer");
  EXPECT_REFUSED(hf(with([](json& j) {
                   j["pre_tokenizer"]["pretokenizers"].insert(j["pre_tokenizer"]["pretokenizers"].begin() + 1,
                                                              json::object({{"type", "Digits"}, {"individual_digits", true}}));
                 })),
                 "Sequence [Split, Digits, ByteLevel]");
  EXPECT_REFUSED(hf(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; })),
                 "Split behavior Removed");
  EXPECT_REFUSED(hf(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; })), "invert");
  EXPECT_REFUSED(hf(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; })),
                 "add_prefix_space");
  EXPECT_REFUSED(hf(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true; })),
                 "two regex stages");
  EXPECT_REFUSED(hf(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "a*"; })),
                 "empty string");
  EXPECT_REFUSED(hf(with([](json& j) { j["model"]["type"] = "WordPiece"; })), "model WordPiece");
  EXPECT_REFUSED(hf(with([](json& j) { j["model"]["dropout"] = 0.1; })), "dropout");
  EXPECT_REFUSED(hf(with([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; })), "continuing_subword_prefix");
  EXPECT_REFUSED(hf(with([](json& j) { j["model"]["end_of_word_suffix"] = "</w>"; })), "end_of_word_suffix");
  EXPECT_REFUSED(hf(with([](json& j) { j["truncation"] = {{"max_length", 512}}; })), "truncation");
  EXPECT_REFUSED(hf(with([](json& j) { j["padding"] = {{"strategy", "BatchLongest"}}; })), "padding");
  EXPECT_REFUSED(hf(with([](json& j) { j["decoder"] = {{"type", "Metaspace"}}; })), "decoder Metaspace");
  EXPECT_REFUSED(hf(with([](json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; })),
                 "post-processor RobertaProcessing");
  EXPECT_REFUSED(hf(with([](json& j) {
                   j["post_processor"] = {{"type", "TemplateProcessing"},
                                          {"single", {{{"Sequence", {{"id", "A"}}}}, {{"SpecialToken", {{"id", "<|bos|>"}}}}}}};
                 })),
                 "TemplateProcessing");
  EXPECT_REFUSED(hf(with([](json& j) { j["model"]["vocab"]["a b"] = 5000u; })), "not byte-level text");
  EXPECT_REFUSED(hf(with([](json& j) { j["model"]["vocab"].erase("a"); })), "no token for byte 97");
  EXPECT_REFUSED(hf(with([](json& j) { j["model"]["merges"].push_back({"Ġ", "ĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠ"}); })),
                 "is not in the vocab");
  EXPECT_REFUSED(hf(with([](json& j) { j["model"]["merges"].push_back(7); })), "merge");
  EXPECT_REFUSED(parse_hf_tokenizer_text("{\"model\": {\"type\": \"BPE\", ", "t.json"), "malformed tokenizer file t.json");
  // A Llama-3-style template that puts a special token before the text is accepted: that token is
  // then the document separator.
  json tmpl = with([](json& j) {
    j["post_processor"] = {{"type", "Sequence"},
                           {"processors",
                            {{{"type", "ByteLevel"}, {"trim_offsets", false}},
                             {{"type", "TemplateProcessing"},
                              {"single", {{{"SpecialToken", {{"id", "<|reserved_3|>"}, {"type_id", 0}}}},
                                          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}}}};
  });
  EXPECT_EQ(hf(tmpl).bos_name(), "<|reserved_3|>");
}

TEST(TokFormats, DocumentSeparatorChoice) {
  using nlohmann::json;
  json j = hf_base();
  // Every special token but <|reserved_*|>: none is a BOS or EOS, so loading says how to add one.
  json kept = json::array();
  for (auto& a : j["added_tokens"])
    if (a["content"] != "<|bos|>") kept.push_back(a);
  const uint32_t old_bos = small_trained().bos_id();
  j["added_tokens"] = kept;
  j["model"]["vocab"].erase("<|bos|>");
  // The id <|bos|> had is now unused (a special token named for it), so the vocabulary is unchanged.
  EXPECT_REFUSED(hf(j), "--add-bos");
  TokenizerOptions add;
  add.add_bos = "<|doc|>";
  Tokenizer t = hf(j, add);
  EXPECT_EQ(t.vocab_size(), small_trained().vocab_size() + 1);
  EXPECT_EQ(t.bos_id(), small_trained().vocab_size());
  EXPECT_EQ(t.bos_name(), "<|doc|>");
  EXPECT_EQ(t.token_bytes()[t.bos_id()], 0u);
  EXPECT_EQ(t.decode({old_bos}), fmt::format("<|unused_{}|>", old_bos));
  std::string s = varied_text(5000, 3);
  EXPECT_EQ(t.encode(s), small_trained().encode(s));
  TokenizerOptions pick;
  pick.bos = "<|reserved_5|>";
  EXPECT_EQ(hf(j, pick).bos_name(), "<|reserved_5|>");
  pick.bos = "<|nope|>";
  EXPECT_REFUSED(hf(j, pick), "no special token named <|nope|>");
  add.bos = "<|reserved_5|>";
  EXPECT_REFUSED(hf(j, add), "not both");
  // The automatic order: <|bos|> before <|endoftext|>.
  json both = hf_base();
  both["added_tokens"][1]["content"] = "<|endoftext|>";
  both["model"]["vocab"]["<|endoftext|>"] = both["added_tokens"][1]["id"];
  both["model"]["vocab"].erase(both["model"]["vocab"].find("<|reserved_0|>"));
  EXPECT_EQ(hf(both).bos_name(), "<|bos|>");
  // --bos and --add-bos on clocklm's own format too.
  TokenizerOptions own;
  own.bos = "<|reserved_0|>";
  auto dir = temp_dir("clocklm_test_tokfmt_bos");
  fs::create_directories(dir);
  small_trained().save((dir / "t.json").string());
  EXPECT_EQ(Tokenizer::load((dir / "t.json").string(), own).bos_name(), "<|reserved_0|>");
  own.bos.clear();
  own.add_bos = "<|bos|>";
  EXPECT_REFUSED(Tokenizer::load((dir / "t.json").string(), own), "already has the special token <|bos|>");
  fs::remove_all(dir);
}

TEST(TokFormats, TiktokenBadInputs) {
  const std::string good = read_file(fixture("nanochat_tokenizer.tiktoken"));
  TokenizerOptions o;
  o.pattern = "clocklm";
  o.add_bos = "<|bos|>";
  EXPECT_NO_THROW(parse_tiktoken_ranks(good, "t.tiktoken", o));
  EXPECT_REFUSED(parse_tiktoken_ranks(good, "t.tiktoken", {}), "needs its split pattern");
  EXPECT_REFUSED(parse_tiktoken_ranks(good, "t.tiktoken", TokenizerOptions{"clocklm", {}, "", ""}), "--add-bos");
  EXPECT_REFUSED(parse_tiktoken_ranks("IQ== 0\nIg=x 1\n", "t.tiktoken", o), "line 2: bad base64");
  EXPECT_REFUSED(parse_tiktoken_ranks("IQ== 0\nIg== \n", "t.tiktoken", o), "line 2: bad rank");
  EXPECT_REFUSED(parse_tiktoken_ranks("IQ==0\n", "t.tiktoken", o), "line 1");
  EXPECT_REFUSED(parse_tiktoken_ranks(good.substr(good.find('\n') + 1), "t.tiktoken", o), "no token for the single byte 0");
  EXPECT_REFUSED(parse_tiktoken_ranks(good + "AA== 5000\n", "t.tiktoken", o), "listed twice");
  o.pattern = "x*";
  EXPECT_REFUSED(parse_tiktoken_ranks(good, "t.tiktoken", o), "empty string");
  o.pattern = "(unclosed";
  EXPECT_REFUSED(parse_tiktoken_ranks(good, "t.tiktoken", o), "invalid pre-split pattern");
}

TEST(TokFormats, PickleReaderRefusesAnythingElse) {
  const std::string good = read_file(fixture("nanochat_tokenizer.pkl"));
  const std::string p3 = read_file(fixture("nanochat_tokenizer_p3.pkl"));
  EXPECT_EQ(read_tiktoken_pickle(good, "t.pkl").mergeable_ranks.size(), 2000u);
  EXPECT_EQ(read_tiktoken_pickle(p3, "t.pkl").name, "rustbpe");
  // Another class, by STACK_GLOBAL (same length, so the frame still fits) and by GLOBAL.
  std::string other = good;
  other.replace(other.find("tiktoken.core"), 13, "posix.systemX");
  EXPECT_REFUSED(read_tiktoken_pickle(other, "t.pkl"), "refers to posix.systemX.Encoding");
  EXPECT_REFUSED(read_tiktoken_pickle(std::string("\x80\x03" "cos\nsystem\nq\x00.", 16), "t.pkl"),
                 "refers to os.system");
  // An opcode such a file never holds: REDUCE in place of NEWOBJ.
  std::string reduce = good;
  reduce[reduce.find('\x81')] = 'R';
  EXPECT_REFUSED(read_tiktoken_pickle(reduce, "t.pkl"), "opcode 0x52");
  EXPECT_REFUSED(read_tiktoken_pickle(good.substr(0, good.size() / 2), "t.pkl"), "t.pkl");
  EXPECT_REFUSED(read_tiktoken_pickle(std::string("\x80\x04", 2), "t.pkl"), "without STOP");
  // A registered encoding pickled by name.
  std::string by_name = std::string("\x80\x04\x8c\x0dtiktoken.core\x8c\x08" "Encoding\x93)\x81\x8c\x0b" "cl100k_base" "b.");
  EXPECT_REFUSED(read_tiktoken_pickle(by_name, "t.pkl"), "registered encoding cl100k_base");
  // A dict holding itself (through the memo) is read without leaking, then refused.
  EXPECT_REFUSED(read_tiktoken_pickle(std::string("\x80\x04}\x94(h\x00h\x00u.", 11), "t.pkl"), "t.pkl");
}

TEST(TokFormats, BadTokenizersWriteNothing) {
  auto dir = temp_dir("clocklm_test_tokfmt_cli");
  fs::remove_all(dir);
  fs::create_directories(dir);
  nlohmann::json j = hf_base();
  j["normalizer"] = {{"type", "NFKC"}};
  atomic_write((dir / "bad.json").string(), j.dump());
  atomic_write((dir / "t.txt").string(), varied_text(20000, 2));
  std::string out;
  EXPECT_NE(cli_test::run_clocklm("tokenizer export --format hf --tokenizer " + (dir / "bad.json").string() +
                                      " --out " + (dir / "hf").string(), &out), 0);
  EXPECT_NE(out.find("normalizer NFKC"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "hf"));
  EXPECT_NE(cli_test::run_clocklm("prepare -q --input " + (dir / "t.txt").string() + " --tokenizer " +
                                      (dir / "bad.json").string() + " --out " + (dir / "data").string(), &out), 0);
  EXPECT_NE(out.find("normalizer NFKC"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "data"));
  // A good one: exported, then used by prepare, which records it in the manifest.
  small_trained().save((dir / "t.json").string());
  ASSERT_EQ(cli_test::run_clocklm("tokenizer export --format hf --tokenizer " + (dir / "t.json").string() +
                                      " --out " + (dir / "hf").string(), &out), 0) << out;
  ASSERT_EQ(cli_test::run_clocklm("prepare -q --txt-doc-bytes 500 --val-fraction 0.2 --input " + (dir / "t.txt").string() +
                                      " --tokenizer " + (dir / "hf").string() + " --out " + (dir / "data").string(),
                                  &out), 0) << out;
  auto m = nlohmann::json::parse(read_file((dir / "data" / "manifest.json").string()));
  EXPECT_EQ(m["tokenizer"]["kind"], "hf");
  EXPECT_EQ(m["tokenizer"]["bos"], "<|bos|>");
  EXPECT_EQ(m["tokenizer"]["path"], fs::absolute(dir / "hf").lexically_normal().string());
  EXPECT_EQ(m["inputs"]["train"][0]["path"], (dir / "t.txt").string());
  EXPECT_EQ(Tokenizer::load((dir / "data").string()).hash(), m["tokenizer"]["hash"].get<std::string>());
  fs::remove_all(dir);
}

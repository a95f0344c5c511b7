// Tests for the CORE benchmark pieces: CPython-exact random, bundle parsing, prompt rendering,
// scored spans, judging, centered accuracy, and the driver against stub scorers.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "core/common.h"
#include "eval/core.h"
#include "eval/pyrandom.h"
#include "test_core_util.h"

using namespace clm;
using nlohmann::json;

namespace {

// Byte-level stub tokenizer: id = byte + 1, BOS = 0.
CoreEncoder byte_encoder() {
  return [](const std::vector<std::string_view>& texts) {
    std::vector<std::vector<uint32_t>> out;
    for (auto t : texts) {
      std::vector<uint32_t> ids;
      for (unsigned char c : t) ids.push_back((uint32_t)c + 1);
      out.push_back(ids);
    }
    return out;
  };
}
std::vector<int32_t> bytes_with_bos(const std::string& s) {
  std::vector<int32_t> t{0};
  for (unsigned char c : s) t.push_back((int32_t)c + 1);
  return t;
}

std::string tmpdir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("clocklm_test_core_" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace

// Vectors from CPython 3.11: random.Random(seed).getrandbits / shuffle / sample.
TEST(CorePyRandom, MatchesCPythonStream) {
  PyRandom r(1337);
  EXPECT_EQ(r.getrandbits(32), 2653228291u);
  EXPECT_EQ(r.getrandbits(32), 3975144315u);
  EXPECT_EQ(r.getrandbits(32), 2290358181u);
  EXPECT_EQ(r.getrandbits(7), 90u);
  EXPECT_EQ(r.getrandbits(1), 0u);
  PyRandom z(0);
  EXPECT_EQ(z.getrandbits(32), 3626764237u);
  EXPECT_EQ(z.getrandbits(32), 1654615998u);
  PyRandom big((1ull << 40) + 5);  // two-word key
  EXPECT_EQ(big.getrandbits(32), 2166296868u);
  EXPECT_EQ(big.getrandbits(32), 2220160828u);
}

TEST(CorePyRandom, ShuffleMatchesCPython) {
  std::vector<int> x(10);
  for (int i = 0; i < 10; i++) x[i] = i;
  PyRandom(1337).shuffle(x);
  EXPECT_EQ(x, (std::vector<int>{0, 3, 7, 2, 1, 6, 4, 5, 8, 9}));
  std::vector<int> y(1000);
  for (int i = 0; i < 1000; i++) y[i] = i;
  PyRandom(1337).shuffle(y);
  EXPECT_EQ(std::vector<int>(y.begin(), y.begin() + 8), (std::vector<int>{239, 310, 101, 624, 1, 628, 612, 482}));
  EXPECT_EQ(std::vector<int>(y.end() - 3, y.end()), (std::vector<int>{546, 947, 632}));
}

TEST(CorePyRandom, SampleMatchesCPython) {
  std::vector<int64_t> pop(100);
  for (int i = 0; i < 100; i++) pop[i] = i;
  // n=100 > setsize 85: the rejection-set algorithm.
  EXPECT_EQ(PyRandom(1234).sample(pop, 10), (std::vector<int64_t>{99, 56, 14, 0, 11, 74, 4, 85, 88, 10}));
  // Few-shot draws: Random(1234+idx).sample([i for i in range(n) if i != idx], k).
  EXPECT_EQ(core_fewshot_indices(20, 1, 10), (std::vector<int64_t>{14, 18, 16, 13, 3, 12, 6, 19, 11, 7}));  // pool
  EXPECT_EQ(core_fewshot_indices(12, 0, 10), (std::vector<int64_t>{8, 2, 1, 10, 7, 5, 9, 6, 4, 11}));         // pool
  EXPECT_EQ(core_fewshot_indices(230, 7, 3), (std::vector<int64_t>{155, 127, 196}));                          // set, k<=5
  EXPECT_EQ(core_fewshot_indices(20321, 5000, 10),
            (std::vector<int64_t>{13465, 6588, 19277, 7362, 5163, 1112, 18555, 13614, 9208, 13380}));
}

TEST(CoreFewShot, NeverPicksItselfAndIsDeterministic) {
  for (int64_t n : {11, 12, 40, 200}) {
    for (int64_t idx = 0; idx < n; idx++) {
      auto a = core_fewshot_indices(n, idx, 10);
      EXPECT_EQ(a, core_fewshot_indices(n, idx, 10));
      std::set<int64_t> seen(a.begin(), a.end());
      EXPECT_EQ(seen.size(), 10u);
      EXPECT_FALSE(seen.count(idx)) << "n=" << n << " idx=" << idx;
      for (auto v : a) EXPECT_TRUE(v >= 0 && v < n);
    }
  }
  EXPECT_THROW(core_fewshot_indices(5, 0, 10), Error);
  EXPECT_TRUE(core_fewshot_indices(5, 0, 0).empty());
}

TEST(CoreBundle, ParsesYamlSubset) {
  json y = parse_core_yaml(
      "# comment\nicl_tasks:\n-\n  label: a\n  num_fewshot: [10]\n  continuation_delimiter: \"\\nAnswer: \"\n"
      "- label: 'b''s'\n  icl_task_type: schema # trailing comment\n  num_fewshot: [0, 5]\n",
      "x.yaml");
  ASSERT_EQ(y["icl_tasks"].size(), 2u);
  EXPECT_EQ(y["icl_tasks"][0]["label"], "a");
  EXPECT_EQ(y["icl_tasks"][0]["num_fewshot"], json::array({"10"}));
  EXPECT_EQ(y["icl_tasks"][0]["continuation_delimiter"], "\nAnswer: ");
  EXPECT_EQ(y["icl_tasks"][1]["label"], "b's");
  EXPECT_EQ(y["icl_tasks"][1]["icl_task_type"], "schema");
  EXPECT_EQ(y["icl_tasks"][1]["num_fewshot"], json::array({"0", "5"}));
  EXPECT_THROW(parse_core_yaml("icl_tasks:\n-\n  label: \"open\n", "x.yaml"), Error);
  EXPECT_THROW(parse_core_yaml("icl_tasks:\n-\n  label: a\n    nested: b\n", "x.yaml"), Error);
  EXPECT_THROW(parse_core_yaml("icl_tasks:\n-\n  label a\n", "x.yaml"), Error);
}

TEST(CoreBundle, ParsesCsv) {
  auto rows = parse_csv("a,b,c\n1,\"x, \"\"y\"\"\nz\",3\r\n", "t.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1][1], "x, \"y\"\nz");
  EXPECT_EQ(rows[1][2], "3");
  EXPECT_THROW(parse_csv("a,\"b\n", "t.csv"), Error);
}

TEST(CoreBundle, LoadsSharedBundle) {
  std::string bundle = std::string(CLOCKLM_SHARED_DATA) + "/core";
  if (!path_exists(bundle + "/core.yaml")) GTEST_SKIP() << "no shared CORE bundle";
  auto tasks = load_core_tasks(bundle);
  ASSERT_EQ(tasks.size(), 22u);
  EXPECT_EQ(tasks[0].label, "hellaswag_zeroshot");
  EXPECT_EQ(tasks[0].num_fewshot, 0);
  EXPECT_EQ(tasks[0].delimiter, " ");
  EXPECT_DOUBLE_EQ(tasks[0].random_baseline, 25);
  EXPECT_EQ(tasks[1].label, "jeopardy");
  EXPECT_EQ(tasks[1].type, CoreTaskType::LanguageModeling);
  EXPECT_EQ(tasks[1].num_fewshot, 10);
  EXPECT_EQ(tasks[1].delimiter, "\nAnswer: ");
  EXPECT_EQ(tasks[11].type, CoreTaskType::Schema);
  EXPECT_DOUBLE_EQ(tasks[21].random_baseline, 9.1);
  // Item order after Random(1337).shuffle, as printed by CPython.
  auto copa = load_core_items(bundle + "/eval_data/commonsense_reasoning/copa.jsonl");
  core_shuffle(copa);
  EXPECT_EQ(copa[0]["query"], "Political violence broke out in the nation, therefore");
  EXPECT_EQ(copa[99]["query"], "The man's pocket jingled as he walked, because");
}

TEST(CoreRender, PyStrip) {
  EXPECT_EQ(py_strip("  a b \t\n"), "a b");
  EXPECT_EQ(py_strip("\xC2\xA0x\xE3\x80\x80"), "x");  // NBSP and ideographic space
  EXPECT_EQ(py_strip("\xC3\xA9"), "\xC3\xA9");
  EXPECT_EQ(py_strip(" \n "), "");
}

// Expected strings are what the reference Jinja templates render (checked with jinja2 3.1).
TEST(CoreRender, MultipleChoicePromptsAndSpans) {
  CoreTask t;
  t.type = CoreTaskType::MultipleChoice;
  t.delimiter = "\nAnswer: ";
  json s1 = {{"query", "Q1?"}, {"choices", {"a1", "b1"}}, {"gold", 1}};
  json s2 = {{"query", "Q2?"}, {"choices", {"a2", "b2"}}, {"gold", 0}};
  json item = {{"query", "Q3?"}, {"choices", {"x", "y z"}}, {"gold", 0}};
  auto p = render_core_prompts(t, item, {&s1, &s2});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0], "Q1?\nAnswer: b1\n\nQ2?\nAnswer: a2\n\nQ3?\nAnswer: x");
  EXPECT_EQ(p[1], "Q1?\nAnswer: b1\n\nQ2?\nAnswer: a2\n\nQ3?\nAnswer: y z");
  EXPECT_EQ(render_core_prompts(t, item, {})[0], "Q3?\nAnswer: x");
  // Spans: after the common prefix (BOS + the 44 bytes up to "Answer: "), to the end of each row.
  auto ex = build_core_example(t.type, {bytes_with_bos(p[0]), bytes_with_bos(p[1])}, 0, 1024);
  ASSERT_EQ(ex.rows.size(), 2u);
  EXPECT_EQ(ex.rows[0].start, 45);
  EXPECT_EQ(ex.rows[0].end, 46);
  EXPECT_EQ(ex.rows[1].start, 45);
  EXPECT_EQ(ex.rows[1].end, 48);
  EXPECT_EQ(ex.rows[0].tokens[0], 0);  // BOS first
}

TEST(CoreRender, SchemaPromptsAndSpans) {
  CoreTask t;
  t.type = CoreTaskType::Schema;
  json s = {{"context_options", {"The cat", "The dog"}}, {"continuation", "barked."}, {"gold", 1}};
  json item = {{"context_options", {"Anna", "Bob"}}, {"continuation", "won."}, {"gold", 0}};
  auto p = render_core_prompts(t, item, {&s});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0], "The dog barked.\n\nAnna won.");
  EXPECT_EQ(p[1], "The dog barked.\n\nBob won.");
  auto ex = build_core_example(t.type, {bytes_with_bos(p[0]), bytes_with_bos(p[1])}, 0, 1024);
  // Common suffix: "a won." vs "b won." -> " won." (5 bytes) ... "Anna" ends in 'a', "Bob" in 'b'.
  EXPECT_EQ(ex.rows[0].end, 27);
  EXPECT_EQ(ex.rows[0].start, 22);
  EXPECT_EQ(ex.rows[1].end, 26);
  EXPECT_EQ(ex.rows[1].start, 21);
}

TEST(CoreRender, LanguageModelingPromptsAndSpans) {
  CoreTask t;
  t.type = CoreTaskType::LanguageModeling;
  json s = {{"context", "  2+2= \n"}, {"continuation", "4"}};
  json item = {{"context", "3+3=\t"}, {"continuation", "6 "}};
  auto p = render_core_prompts(t, item, {&s});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0], "2+2= 4\n\n3+3=");    // stripped: the delimiter's space is not left dangling
  EXPECT_EQ(p[1], "2+2= 4\n\n3+3= 6 ");
  auto ex = build_core_example(t.type, {bytes_with_bos(p[0]), bytes_with_bos(p[1])}, 0, 1024);
  ASSERT_EQ(ex.rows.size(), 1u);
  EXPECT_FALSE(ex.prefix_mismatch);
  EXPECT_EQ(ex.rows[0].start, 13);  // BOS + 12 bytes of the stripped prompt: scores " 6 "
  EXPECT_EQ(ex.rows[0].end, 16);
}

TEST(CoreRender, CropsFromTheLeft) {
  auto ex = build_core_example(CoreTaskType::LanguageModeling, {bytes_with_bos("abcdefgh"), bytes_with_bos("abcdefghXY")}, 0, 6);
  ASSERT_EQ(ex.rows[0].tokens.size(), 6u);
  EXPECT_EQ(ex.rows[0].tokens, (std::vector<int32_t>{'e' + 1, 'f' + 1, 'g' + 1, 'h' + 1, 'X' + 1, 'Y' + 1}));
  EXPECT_EQ(ex.rows[0].start, 4);
  EXPECT_EQ(ex.rows[0].end, 6);
}

TEST(CoreScore, JudgeAndCentered) {
  CoreExample ex;
  ex.rows.resize(3);
  ex.gold = 1;
  EXPECT_TRUE(judge_core_example(CoreTaskType::MultipleChoice, ex, {{2.0, false}, {1.0, false}, {3.0, false}}));
  EXPECT_FALSE(judge_core_example(CoreTaskType::MultipleChoice, ex, {{0.5, true}, {1.0, true}, {3.0, true}}));
  EXPECT_FALSE(judge_core_example(CoreTaskType::Schema, ex, {{1.0, true}, {1.0, true}, {3.0, true}}));  // tie: first
  CoreExample lm;
  lm.rows.resize(1);
  EXPECT_TRUE(judge_core_example(CoreTaskType::LanguageModeling, lm, {{9.0, true}}));
  EXPECT_FALSE(judge_core_example(CoreTaskType::LanguageModeling, lm, {{0.0, false}}));
  EXPECT_DOUBLE_EQ(centered_accuracy(0.4, 25), (0.4 - 0.25) / 0.75);
  EXPECT_DOUBLE_EQ(centered_accuracy(0.5, 50), 0.0);
  EXPECT_DOUBLE_EQ(centered_accuracy(0.3, 0), 0.3);
  EXPECT_NEAR(centered_accuracy(0.2566, 9.1), (0.2566 - 0.091) / 0.909, 1e-15);
}

namespace {

// A stub model that "knows" the answers: gold choices / gold context options contain '*'. The loss
// at position p is 0 when a '*' occurs in the current shot (since the last blank line) up to p,
// else 5; argmax is an oracle (the target itself) so every LM item is right.
CoreModel star_model(int context = 4096, int rows = 3) {
  CoreModel m;
  m.encode = byte_encoder();
  m.bos = 0;
  m.context = context;
  m.max_rows = rows;
  m.score = [](const int32_t* in, const int32_t* tg, int B, int T, float* loss, int32_t* am) {
    for (int b = 0; b < B; b++) {
      bool star = false;
      for (int p = 0; p < T; p++) {
        int32_t c = in[b * T + p];
        if (c == '\n' + 1 && p > 0 && in[b * T + p - 1] == '\n' + 1) star = false;
        if (c == '*' + 1) star = true;
        loss[b * T + p] = tg[b * T + p] >= 0 ? (star ? 0.0f : 5.0f) : 0.0f;
        am[b * T + p] = tg[b * T + p] >= 0 ? tg[b * T + p] : 0;
      }
    }
  };
  return m;
}

// Each test uses its own folder: ctest runs tests as parallel processes.
std::string make_bundle(bool with_missing, const std::string& name) {
  std::string dir = tmpdir(name);
  core_test::write_core_bundle(dir, with_missing);
  return dir;
}

}  // namespace

TEST(CoreScore, StubThatKnowsTheAnswersScoresOne) {
  std::string dir = make_bundle(false, "bundle_stub");
  CoreOptions opt;
  opt.bundle = dir;
  opt.progress = false;
  json r = eval_core(star_model(), opt);
  for (const char* t : {"mc", "sc", "lm"}) {
    EXPECT_DOUBLE_EQ(r["tasks"][t]["accuracy"].get<double>(), 1.0) << t;
    EXPECT_DOUBLE_EQ(r["tasks"][t]["centered"].get<double>(), 1.0) << t;
    EXPECT_EQ(r["tasks"][t]["n"], 9);
  }
  EXPECT_DOUBLE_EQ(r["core"].get<double>(), 1.0);
  EXPECT_EQ(r["tasks_evaluated"], 3);
  EXPECT_EQ(r["tasks_total"], 3);
  EXPECT_TRUE(r["missing"].empty());
  // A model that always prefers the first row gets MC right 3/9 times (gold 0 at i = 0, 4, 8).
  CoreModel first = star_model();
  first.score = [](const int32_t*, const int32_t* tg, int B, int T, float* loss, int32_t* am) {
    for (int i = 0; i < B * T; i++) { loss[i] = 1.0f; am[i] = -7; }
  };
  opt.tasks = {"mc", "lm"};
  json f = eval_core(first, opt);
  EXPECT_DOUBLE_EQ(f["tasks"]["mc"]["accuracy"].get<double>(), 3.0 / 9);
  EXPECT_DOUBLE_EQ(f["tasks"]["mc"]["centered"].get<double>(), (3.0 / 9 - 0.25) / 0.75);
  EXPECT_DOUBLE_EQ(f["tasks"]["lm"]["accuracy"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(f["core"].get<double>(), ((3.0 / 9 - 0.25) / 0.75 + 0.0) / 2);
  EXPECT_EQ(f["tasks_evaluated"], 2);
  EXPECT_FALSE(f["tasks"].contains("sc"));
  opt.tasks = {"nope"};
  EXPECT_THROW(eval_core(first, opt), Error);
  // Max-per-task truncates after the shuffle; batching does not change results.
  opt.tasks = {};
  opt.max_per_task = 5;
  json q = eval_core(star_model(4096, 1), opt);
  EXPECT_EQ(q["tasks"]["mc"]["n"], 5);
  EXPECT_DOUBLE_EQ(q["core"].get<double>(), 1.0);
  std::filesystem::remove_all(dir);
}

TEST(CoreScore, MissingFileIsReportedNotFatal) {
  std::string dir = make_bundle(true, "bundle_missing");
  CoreOptions opt;
  opt.bundle = dir;
  opt.progress = false;
  json r = eval_core(star_model(), opt);
  EXPECT_EQ(r["missing"], json::array({"gone"}));
  EXPECT_EQ(r["tasks_evaluated"], 3);
  EXPECT_EQ(r["tasks_total"], 4);
  EXPECT_NE(r["note"].get<std::string>().find("CORE over 3 of 4 tasks (missing: gone)"), std::string::npos);
  std::string table = format_core_table(r);
  EXPECT_NE(table.find("gone                               , missing   , missing"), std::string::npos) << table;
  EXPECT_NE(table.find("CORE                               ,           , 1.000000"), std::string::npos) << table;
  EXPECT_NE(table.find("CORE over 3 of 4 tasks"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(CoreBundle, MalformedInputIsAClearError) {
  std::string dir = make_bundle(false, "bundle_malformed");
  atomic_write(dir + "/eval_data/x/sc.jsonl", "{\"context_options\": [\"a\"], \n");
  CoreOptions opt;
  opt.bundle = dir;
  opt.progress = false;
  opt.tasks = {"sc"};
  try {
    eval_core(star_model(), opt);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sc.jsonl:1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_core_tasks(dir + "/nonexistent"), Error);
  std::filesystem::remove_all(dir);
}

// Fields of the wrong type, escapes that are not hex or beyond Unicode, absurd few-shot counts and
// a gold index that would wrap into range are clear errors.
TEST(CoreBundle, WrongTypesAndRangesAreClearErrors) {
  const std::string csv = "Eval Task,Random baseline\nt,25\n";
  auto tasks = [&](const std::string& yaml) {
    try {
      parse_core_tasks(yaml, csv, "core.yaml", "meta.csv");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string item = "icl_tasks:\n- label: t\n  dataset_uri: x.jsonl\n  icl_task_type: schema\n";
  EXPECT_EQ(tasks(item + "  num_fewshot: [3]\n"), "(no error)");
  EXPECT_NE(tasks("icl_tasks:\n- label: [t]\n  dataset_uri: x\n  icl_task_type: schema\n  num_fewshot: 0\n")
                .find("must be a string"),
            std::string::npos);
  EXPECT_NE(tasks(item + "  num_fewshot: [99999999999]\n").find("bad num_fewshot"), std::string::npos);
  EXPECT_THROW(parse_core_yaml("a: \"\\x+1\"\n", "y"), Error);
  EXPECT_THROW(parse_core_yaml("a: \"\\UFFFFFFFF\"\n", "y"), Error);
  EXPECT_EQ(parse_core_yaml("a: \"\\u00e9\"\n", "y")["a"], "\xC3\xA9");
  // Bytes that are not UTF-8 (raw or spelled as a surrogate escape) are refused where they are read,
  // not when a value reaches JSON output or an error message (found by fuzzing).
  EXPECT_THROW(parse_core_yaml("a: \xff\n", "y"), Error);
  EXPECT_THROW(parse_core_yaml("a: \"\\uD800\"\n", "y"), Error);
  EXPECT_NE(tasks("icl_tasks:\n- label: \xfe\n  dataset_uri: x\n  icl_task_type: schema\n  num_fewshot: 0\n")
                .find("not valid UTF-8"),
            std::string::npos);
  CoreTask mc;
  auto items = parse_core_items("{\"query\": \"q\", \"choices\": [\"a\", \"b\"], \"gold\": 4294967296}\n", "t.jsonl");
  EXPECT_THROW(render_core_prompts(mc, items.at(0), {}), Error);
  EXPECT_THROW(parse_core_items("{\"a\": 1}\n[1]\n", "t.jsonl"), Error);
}

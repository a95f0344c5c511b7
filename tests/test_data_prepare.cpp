// End-to-end tests of `prepare` on a small generated corpus in every input format: manifest counts
// match the shards, shards decode back to the documents, re-running is a no-op, a different
// preparation is refused without --force, failures leave nothing behind, the loader reads it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/common.h"
#include "test_cli_util.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/preset.h"
#include "tok/tokenizer.h"

using namespace clm;
namespace fs = std::filesystem;

namespace {

const char* kWords[] = {"the", "cat", "sat", "on", "a", "mat", "and", "then", "it", "ran", "over", "hills",
                        "naïve", "café", "über", "日本", "!", ",", "42", "1999", "\n", "  ", "data", "model"};

std::string make_doc(Rng& rng, int words) {
  std::string s;
  for (int i = 0; i < words; ++i) {
    if (i) s += ' ';
    s += kWords[rng.next() % (sizeof kWords / sizeof *kWords)];
  }
  return s;
}

std::string json_escape(const std::string& s) { return nlohmann::json(s).dump(); }

struct Corpus {
  fs::path dir;
  std::vector<std::string> docs;  // in file order (files sorted by name)
};

// a.txt (1 doc), b.jsonl, c.jsonl.zst, d.jsonl.gz; b.jsonl has 2 malformed lines.
Corpus make_corpus(const std::string& name, int per_file = 60) {
  Corpus c;
  c.dir = fs::temp_directory_path() / fmt::format("clocklm_{}_{}", name, getpid());
  fs::remove_all(c.dir);
  fs::create_directories(c.dir / "in");
  Rng rng(11);
  std::string txt = make_doc(rng, 300);
  atomic_write((c.dir / "in" / "a.txt").string(), txt);
  c.docs.push_back(txt);
  for (const char* f : {"b.jsonl", "c.jsonl.zst", "d.jsonl.gz"}) {
    std::string lines;
    for (int i = 0; i < per_file; ++i) {
      std::string d = make_doc(rng, 5 + int(rng.next() % 80));
      c.docs.push_back(d);
      lines += "{\"id\": " + std::to_string(i) + ", \"text\": " + json_escape(d) + "}\n";
      if (std::string(f) == "b.jsonl" && (i == 3 || i == 10)) lines += "{\"text\": oops}\n";
    }
    fs::path p = c.dir / "in" / f;
    if (p.extension() == ".zst") {
      std::string out(ZSTD_compressBound(lines.size()), '\0');
      out.resize(ZSTD_compress(out.data(), out.size(), lines.data(), lines.size(), 1));
      atomic_write(p.string(), out);
    } else if (p.extension() == ".gz") {
      gzFile g = gzopen(p.c_str(), "wb");
      gzwrite(g, lines.data(), unsigned(lines.size()));
      gzclose(g);
    } else {
      atomic_write(p.string(), lines);
    }
  }
  return c;
}

PrepareOptions base_opts(const Corpus& c, const std::string& out = "ds") {
  PrepareOptions o;
  o.inputs = {(c.dir / "in").string()};
  o.out = (c.dir / out).string();
  o.vocab_size = 512;
  o.val_fraction = 0.2;
  o.shard_tokens = 2000;  // several shards
  o.quiet = true;
  return o;
}

// Documents of one split, decoded from its shards.
std::vector<std::string> decode_split(const Dataset& ds, const std::vector<std::string>& shards) {
  std::vector<std::string> docs;
  std::vector<uint32_t> cur;
  bool open = false;
  uint32_t bos = ds.tokenizer.bos_id();
  for (const auto& p : shards) {
    Shard sh = Shard::open(p);
    EXPECT_GT(sh.size(), 0u);
    EXPECT_EQ(sh.at(0), bos) << p << " must start with BOS (a shard never splits a document)";
    for (uint64_t i = 0; i < sh.size(); ++i) {
      if (sh.at(i) == bos) {
        if (open) docs.push_back(ds.tokenizer.decode(cur));
        cur.clear();
        open = true;
      } else {
        cur.push_back(sh.at(i));
      }
    }
  }
  if (open) docs.push_back(ds.tokenizer.decode(cur));
  return docs;
}

std::string snapshot(const fs::path& dir) {  // names, sizes and content hashes of a folder
  std::string s;
  std::vector<fs::path> files;
  for (auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (auto& f : files) {
    if (f.filename() == "manifest.json") continue;  // holds a timestamp
    std::string d = read_file(f.string());
    s += f.filename().string() + ":" + hex64(fnv1a64(d.data(), d.size())) + "\n";
  }
  return s;
}

}  // namespace

TEST(DataPrepare, ManifestMatchesShardsAndDocumentsRoundTrip) {
  Corpus c = make_corpus("prep_basic");
  PrepareResult r = prepare_dataset(base_opts(c));
  EXPECT_FALSE(r.already_prepared);
  Dataset ds = Dataset::open((c.dir / "ds").string());
  const auto& m = ds.manifest;
  EXPECT_EQ(m["format"], "clocklm-dataset");
  EXPECT_EQ(m["tokenizer"]["hash"], ds.tokenizer.hash());
  EXPECT_EQ(m["tokenizer"]["vocab_size"], ds.tokenizer.vocab_size());
  EXPECT_EQ(m["malformed_lines"], 2);
  EXPECT_EQ(m["inputs"]["train"].size(), 4u);
  EXPECT_GT(ds.train_shards.size(), 1u);
  std::vector<std::string> train = decode_split(ds, ds.train_shards), val = decode_split(ds, ds.val_shards);
  for (auto [split, docs] : {std::pair{"train", &train}, std::pair{"val", &val}}) {
    const auto& s = m["splits"][split];
    uint64_t tokens = 0, bytes = 0;
    for (const auto& p : (std::string(split) == "train" ? ds.train_shards : ds.val_shards)) tokens += Shard::open(p).size();
    for (const auto& d : *docs) bytes += d.size();
    EXPECT_EQ(s["tokens"].get<uint64_t>(), tokens) << split;
    EXPECT_EQ(s["documents"].get<size_t>(), docs->size()) << split;
    EXPECT_EQ(s["bytes"].get<uint64_t>(), bytes) << split;
    uint64_t shard_sum = 0;
    for (const auto& sh : s["shards"]) shard_sum += sh["tokens"].get<uint64_t>();
    EXPECT_EQ(shard_sum, tokens);
  }
  // Every input document is in exactly one split, in input order, chosen by held_out().
  std::vector<std::string> want_train, want_val;
  for (const auto& d : c.docs) (held_out(d, 0.2) ? want_val : want_train).push_back(d);
  EXPECT_EQ(train, want_train);
  EXPECT_EQ(val, want_val);
  EXPECT_FALSE(val.empty());
  // Nothing else is left next to the output.
  for (auto& e : fs::directory_iterator(c.dir)) EXPECT_TRUE(e.path().filename() == "in" || e.path().filename() == "ds") << e.path();
  fs::remove_all(c.dir);
}

TEST(DataPrepare, IdempotentAndRefusesADifferentPreparation) {
  Corpus c = make_corpus("prep_idem");
  PrepareOptions o = base_opts(c);
  prepare_dataset(o);
  std::string before = snapshot(c.dir / "ds");
  std::string manifest = read_file((c.dir / "ds" / "manifest.json").string());
  o.threads = 1;  // the thread count is not part of the preparation
  PrepareResult again = prepare_dataset(o);
  EXPECT_TRUE(again.already_prepared);
  EXPECT_EQ(read_file((c.dir / "ds" / "manifest.json").string()), manifest) << "a no-op must not rewrite";

  PrepareOptions other = o;
  other.vocab_size = 600;
  try {
    prepare_dataset(other);
    ADD_FAILURE() << "a different preparation was accepted without --force";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tokenizer"), std::string::npos) << e.what();
  }
  EXPECT_EQ(snapshot(c.dir / "ds"), before);
  other.force = true;
  EXPECT_FALSE(prepare_dataset(other).already_prepared);
  // (the trainer may stop below 600 on this tiny corpus, so check the recorded recipe)
  EXPECT_EQ(Dataset::open((c.dir / "ds").string()).manifest["preparation"]["tokenizer"]["train"]["vocab_size"], 600);

  // Same inputs and parameters into a fresh folder with one thread: byte-identical output.
  fs::remove_all(c.dir / "ds2");
  PrepareOptions o2 = base_opts(c, "ds2");
  o2.threads = 1;
  prepare_dataset(o2);
  EXPECT_EQ(snapshot(c.dir / "ds2"), before);
  fs::remove_all(c.dir);
}

TEST(DataPrepare, ChangedInputIsADifferentPreparation) {
  Corpus c = make_corpus("prep_changed");
  PrepareOptions o = base_opts(c);
  prepare_dataset(o);
  atomic_write((c.dir / "in" / "a.txt").string(), "changed text");
  EXPECT_THROW(prepare_dataset(o), Error);
  fs::remove_all(c.dir);
}

TEST(DataPrepare, SeparateValidationInputsAndGivenTokenizer) {
  Corpus c = make_corpus("prep_val");
  PrepareOptions o = base_opts(c);
  prepare_dataset(o);
  PrepareOptions v;
  v.inputs = {(c.dir / "in" / "b.jsonl").string(), (c.dir / "in" / "c.jsonl.zst").string()};
  v.val_inputs = {(c.dir / "in" / "d.jsonl.gz").string()};
  v.tokenizer = (c.dir / "ds").string();  // a dataset folder holds tokenizer.json
  v.out = (c.dir / "ds_val").string();
  v.quiet = true;
  prepare_dataset(v);
  Dataset a = Dataset::open((c.dir / "ds").string()), b = Dataset::open(v.out);
  EXPECT_EQ(a.tokenizer.hash(), b.tokenizer.hash());
  auto val = decode_split(b, b.val_shards);
  EXPECT_EQ(val, std::vector<std::string>(c.docs.end() - 60, c.docs.end()));
  EXPECT_EQ(decode_split(b, b.train_shards).size(), 120u);
  EXPECT_EQ(b.manifest["malformed_lines"], 2);
  // the same file as train and val is refused
  v.val_inputs = {(c.dir / "in" / "b.jsonl").string()};
  v.out = (c.dir / "ds_bad").string();
  EXPECT_THROW(prepare_dataset(v), Error);
  fs::remove_all(c.dir);
}

TEST(DataPrepare, FailuresLeaveNothingBehind) {
  Corpus c = make_corpus("prep_fail");
  PrepareOptions o = base_opts(c);
  o.val_fraction = 1e-9;  // nothing held out -> error after tokenizing
  EXPECT_THROW(prepare_dataset(o), Error);
  for (auto& e : fs::directory_iterator(c.dir)) EXPECT_EQ(e.path().filename(), "in") << e.path();
  // refuses to write into a folder that is not a dataset, even with --force
  fs::create_directories(c.dir / "notes");
  atomic_write((c.dir / "notes" / "keep.txt").string(), "precious");
  PrepareOptions n = base_opts(c, "notes");
  n.force = true;
  EXPECT_THROW(prepare_dataset(n), Error);
  EXPECT_EQ(read_file((c.dir / "notes" / "keep.txt").string()), "precious");
  // option errors
  PrepareOptions bad = base_opts(c);
  bad.inputs = {(c.dir / "in" / "missing.jsonl").string()};
  EXPECT_THROW(prepare_dataset(bad), Error);
  bad = base_opts(c);
  bad.tokenizer = "x";
  EXPECT_THROW(prepare_dataset(bad), Error);  // --tokenizer with --vocab-size
  fs::remove_all(c.dir);
}

TEST(DataPrepare, OneTextFileCutIntoDocuments) {
  Corpus c = make_corpus("prep_txtcut");
  Rng rng(3);
  std::string text;
  for (int i = 0; i < 200; ++i) text += make_doc(rng, 20) + "\n\n";
  atomic_write((c.dir / "one.txt").string(), text);
  PrepareOptions o = base_opts(c);
  o.inputs = {(c.dir / "one.txt").string()};
  EXPECT_THROW(prepare_dataset(o), Error);  // one document: nothing to hold out
  o.txt_doc_bytes = 300;
  prepare_dataset(o);
  Dataset ds = Dataset::open(o.out);
  auto train = decode_split(ds, ds.train_shards), val = decode_split(ds, ds.val_shards);
  EXPECT_EQ(train.size() + val.size(), cut_at_blank_lines(text, 300).size());
  EXPECT_FALSE(val.empty());
  fs::remove_all(c.dir);
}

TEST(DataPrepare, DatasetOpenChecksTheTokenizer) {
  Corpus c = make_corpus("prep_open");
  prepare_dataset(base_opts(c));
  fs::path ds = c.dir / "ds";
  nlohmann::json m = nlohmann::json::parse(read_file((ds / "manifest.json").string()));
  std::string good = m.dump();
  m["tokenizer"]["hash"] = "0123456789abcdef";
  atomic_write((ds / "manifest.json").string(), m.dump());
  try {
    Dataset::open(ds.string());
    ADD_FAILURE() << "a tokenizer that is not the manifest's was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0123456789abcdef"), std::string::npos) << e.what();
  }
  atomic_write((ds / "manifest.json").string(), good);
  fs::remove(ds / "tokenizer.json");
  EXPECT_THROW(Dataset::open(ds.string()), Error);
  fs::remove_all(c.dir);
}

TEST(DataPrepare, LoaderReadsAPreparedDataset) {
  Corpus c = make_corpus("prep_loader");
  prepare_dataset(base_opts(c));
  LoaderOptions lo;
  lo.dir = (c.dir / "ds").string();
  lo.split = "val";
  lo.shuffle = false;
  lo.loop = false;
  lo.B = 2;
  lo.T = 16;
  DataLoader dl(lo);
  Dataset ds = Dataset::open(lo.dir);
  std::vector<int32_t> x(32), y(32);
  int batches = 0;
  while (dl.next(x.data(), y.data())) {
    EXPECT_EQ(uint32_t(x[0]), ds.tokenizer.bos_id());
    EXPECT_EQ(uint32_t(x[16]), ds.tokenizer.bos_id());
    ++batches;
  }
  EXPECT_EQ(uint64_t(batches), dl.rows() / 2);
  EXPECT_EQ(dl.tokens(), ds.manifest["splits"]["val"]["tokens"].get<uint64_t>());
  fs::remove_all(c.dir);
}

TEST(DataPrepare, CommandLineErrorsAreOneLine) {
  std::string out;
  EXPECT_EQ(cli_test::run_clocklm("prepare --input /nonexistent/x.jsonl --out /tmp/clocklm_never", &out), 1);
  EXPECT_EQ(out.rfind("clocklm: error: ", 0), 0u) << out;
  EXPECT_NE(out.find("/nonexistent/x.jsonl"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists("/tmp/clocklm_never"));
}

TEST(DataPreset, DocumentSplitters) {
  std::string info = std::string("This is x.info, produced by makeinfo.\n\x1f\nFile: x.info,  Node: Top,  Next: A\n\n") +
                     "Intro text that is long enough to be kept as a document of its own, really.\n\n* Menu:\n\n* A::\n" +
                     "\x1f\nFile: x.info,  Node: A,  Prev: Top\n\nSection A explains a thing " + std::string("\0\b[index\0\b]", 11) +
                     "in enough words to pass the minimum length of a node.\n\x1f\nTag Table:\nNode: Top\x7f" "12\n\x1f\nEnd Tag Table\n";
  auto nodes = split_info(info);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0], "Intro text that is long enough to be kept as a document of its own, really.");
  EXPECT_EQ(nodes[1], "Section A explains a thing in enough words to pass the minimum length of a node.");
  auto f = split_fortunes("First one.\n\t-- Someone\n%\nSecond\n%\n%\nThird\n");
  EXPECT_EQ(f, (std::vector<std::string>{"First one.\n\t-- Someone", "Second", "Third"}));
  std::string jargon = "Title\n   Table of Contents\n   :entry: in toc\nChapter 1. Slang\n\n   Some prose.\n\n"
                       "   :foo: n.\n\n   A foo.\n\n   :bar baz: v.\n\n   To bar.\n";
  auto j = split_jargon(jargon);
  EXPECT_EQ(j, (std::vector<std::string>{"Chapter 1. Slang\n\nSome prose.", ":foo: n.\n\nA foo.", ":bar baz: v.\n\nTo bar."}));
}

TEST(DataPreset, DebianDocsFilesAndDocuments) {
  EXPECT_THROW(find_preset("nope"), Error);
  std::vector<std::string> files;
  try {
    files = preset_files("debian-docs");
  } catch (const Error& e) {
    GTEST_SKIP() << "preset packages not installed (scripts/setup.sh installs them): " << e.what();
  }
  CorpusStats st;
  int64_t short_docs = 0;
  for_each_preset_document(files, [&](std::string_view d) { short_docs += d.size() < 8; return true; }, &st);
  EXPECT_EQ(st.files, int64_t(files.size()));
  EXPECT_GT(st.bytes, 10'000'000) << "the preset must give several MB of text";
  EXPECT_GT(st.documents, 5000);
  EXPECT_LT(short_docs, st.documents / 100);
}

// Nothing deleted that is not ours: the real binary, run as a child, is aimed at folders it must
// not replace (the current folder, a dataset, a run, a folder holding an input, a folder it did
// not write) and is refused in one line with every file unchanged; an earlier export is replaced
// only with --force; an export interrupted by SIGINT/SIGTERM leaves no temporary folder, one killed
// by SIGKILL leaves one that the next export removes; a kill between the two renames of a swap
// leaves the old export in place or restores it on the next run. The same for `prepare` and
// `tokenizer export`.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "core/common.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "test_cli_util.h"
#include "test_hostile_util.h"
#include "test_run_util.h"
#include "tok/tokenizer.h"
#include "test_model_util.h"

using namespace clm;
namespace fs = std::filesystem;

namespace {

fs::path test_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / fmt::format("clocklm_hostile_folders_{}_{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A run folder with one checkpoint of a tiny model and run.json naming the test dataset.
std::string make_run(const fs::path& dir) {
  const std::string ds = run_test::tiny_dataset();
  const Tokenizer tok = Tokenizer::load(ds);
  RunConfig cfg;
  cfg.model = model_test::tiny_config({.n_layer = 1, .d_model = 32, .n_head = 1, .n_kv_head = 1, .head_dim = 32,
                                        .vocab_size = int(tok.vocab_size()), .seq_len = 32});
  cfg.model.matmul_precision = "fp32";
  GPT model(cfg.model, 1, cfg.model.seq_len);
  model.init_weights(3);
  Optimizer opt(model.params(), cfg.optim);
  fs::create_directories(dir / "checkpoints");
  save_checkpoint((dir / "checkpoints" / "step_00000001.ckpt").string(), cfg, model, opt, {{"step", 1}});
  atomic_write((dir / "checkpoints" / "latest").string(), "step_00000001.ckpt\n");
  atomic_write((dir / "run.json").string(),
               nlohmann::json({{"dataset", {{"dir", ds}, {"tokenizer_hash", tok.hash()}}}}).dump());
  return dir.string();
}

// A folder of a user's own files.
void make_user_files(const fs::path& dir) {
  fs::create_directories(dir / "notes");
  hostile::write_file(dir / "thesis.tex", "my thesis\n");
  hostile::write_file(dir / "notes" / "todo.txt", "everything\n");
}

// Hidden names beside a written folder: ".NAME.tmp.PID", ".NAME.old.PID", ".NAME.lock".
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.starts_with(".") && (n.find(".tmp.") != std::string::npos || n.find(".old.") != std::string::npos ||
                               n.ends_with(".lock")))
      out.push_back(n);
  }
  return out;
}

bool has_leftover(const fs::path& dir, const std::string& prefix) {
  for (const std::string& n : leftovers(dir))
    if (n.starts_with(prefix)) return true;
  return false;
}

std::string bin() { return cli_test::clocklm_binary(); }

std::string export_cmd(const std::string& run, const fs::path& out, const std::string& extra = "") {
  return bin() + " export --checkpoint " + run + " --format safetensors --out " + out.string() + " " + extra;
}

// Ended by `sig`: directly, or through the shell that ran it (128 + sig).
bool ended_by(const hostile::Outcome& o, int sig) { return o.signal == sig || o.exit_code == 128 + sig; }

void expect_refused_unchanged(const std::string& cmd, const fs::path& watched, const std::string& want) {
  const auto before = hostile::snapshot(watched);
  const hostile::Outcome o = hostile::run_limited(cmd);
  EXPECT_CLEAN_REFUSAL(o);
  EXPECT_NE(o.out.find("clocklm: error:"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(want), std::string::npos) << o.out;
  EXPECT_EQ(hostile::snapshot(watched), before) << cmd;
}

struct Fixture {
  fs::path dir;
  std::string run;
};

Fixture fixture(const std::string& name) {
  Fixture f;
  f.dir = test_dir(name);
  f.run = make_run(f.dir / "run");
  return f;
}

}  // namespace

TEST(HostileFolders, ExportNeverReplacesTheCurrentFolderOrAnAncestor) {
  Fixture f = fixture("cwd");
  const fs::path user = f.dir / "user";
  make_user_files(user);
  expect_refused_unchanged("cd " + user.string() + " && " + export_cmd(f.run, ".", "--force"), f.dir,
                           "current folder");
  expect_refused_unchanged("cd " + user.string() + " && " + export_cmd(f.run, "..", "--force"), f.dir,
                           "current folder");
  // Even when the current folder is an earlier export: replacing it would pull it from under the shell.
  ASSERT_EQ(hostile::run_limited(export_cmd(f.run, f.dir / "e")).exit_code, 0);
  expect_refused_unchanged("cd " + (f.dir / "e").string() + " && " + export_cmd(f.run, ".", "--force"), f.dir,
                           "current folder");
  EXPECT_TRUE(leftovers(f.dir).empty());
  fs::remove_all(f.dir);
}

TEST(HostileFolders, ExportNeverReplacesAFolderHoldingAnInput) {
  Fixture f = fixture("inputs");
  const std::string ds = run_test::tiny_dataset();
  // The dataset it reads (named by --data, and as the run's dataset), the run folder, an ancestor.
  expect_refused_unchanged(export_cmd(f.run, ds, "--force --data " + ds), ds, "input");
  expect_refused_unchanged(export_cmd(f.run, ds, "--force"), ds, "dataset folder");
  expect_refused_unchanged(export_cmd(f.run, f.run, "--force"), f.dir, "input");
  expect_refused_unchanged(export_cmd(f.run + "/checkpoints/step_00000001.ckpt", f.run, "--force"), f.dir, "input");
  expect_refused_unchanged(export_cmd(f.run, f.dir, "--force"), f.dir, "input");
  // An input inside an earlier export: the export's own tokenizer file given as --tokenizer.
  const fs::path e = f.dir / "e";
  ASSERT_EQ(hostile::run_limited(export_cmd(f.run, e)).exit_code, 0);
  expect_refused_unchanged(export_cmd(f.run, e, "--force --tokenizer " + (e / "clocklm_tokenizer.json").string()),
                           f.dir, "input");
  // The same folder spelled through a symbolic link.
  fs::create_directory_symlink(f.run, f.dir / "link");
  expect_refused_unchanged(export_cmd(f.run, f.dir / "link", "--force"), f.dir, "");
  EXPECT_TRUE(leftovers(f.dir).empty());
  fs::remove_all(f.dir);
}

TEST(HostileFolders, ExportForceReplacesOnlyAnEarlierExport) {
  Fixture f = fixture("marker");
  const fs::path user = f.dir / "user";
  make_user_files(user);
  expect_refused_unchanged(export_cmd(f.run, user, "--force"), user, ".clocklm-export");
  expect_refused_unchanged(export_cmd(f.run, user), user, "not a folder clocklm exported");
  // A file named like the marker but not one is not enough.
  hostile::write_file(user / ".clocklm-export", "{}");
  expect_refused_unchanged(export_cmd(f.run, user, "--force"), user, "refusing");
  // An earlier export: refused without --force, replaced with it.
  const fs::path e = f.dir / "e";
  hostile::Outcome o = hostile::run_limited(export_cmd(f.run, e));
  ASSERT_EQ(o.exit_code, 0) << o.out;
  const auto marker = nlohmann::json::parse(read_file((e / ".clocklm-export").string()));
  EXPECT_EQ(marker["format"], "clocklm-export-folder");
  EXPECT_EQ(marker["export_format"], "safetensors");
  EXPECT_TRUE(marker.contains("created"));
  EXPECT_EQ(o.out.find(".clocklm-export"), std::string::npos) << o.out;  // not listed as a file written
  expect_refused_unchanged(export_cmd(f.run, e), e, "--force");
  o = hostile::run_limited(export_cmd(f.run, e, "--force --dtype bf16"));
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_EQ(nlohmann::json::parse(read_file((e / "clocklm_config.json").string()))["dtype"], "bf16");
  EXPECT_TRUE(fs::exists(e / ".clocklm-export"));
  EXPECT_TRUE(leftovers(f.dir).empty());
  fs::remove_all(f.dir);
}

TEST(HostileFolders, ExportInterruptedBySignalLeavesNoTemp) {
  Fixture f = fixture("signal");
  const fs::path e = f.dir / "e";
  // Raised by the process itself halfway through writing clocklm_config.json into the temp folder.
  for (auto [fault, sig] : {std::pair{"signal-in-write", SIGTERM}, std::pair{"interrupt-in-write", SIGINT}}) {
    SCOPED_TRACE(fault);
    const hostile::Outcome o = hostile::run_limited(
        "CLOCKLM_FAULT=" + std::string(fault) + ":clocklm_config.json:1 " + export_cmd(f.run, e));
    EXPECT_TRUE(ended_by(o, sig)) << o.exit_code << " " << o.signal << " " << o.out;
    EXPECT_FALSE(fs::exists(e));
    EXPECT_TRUE(leftovers(f.dir).empty()) << fmt::format("{}", fmt::join(leftovers(f.dir), " "));
  }
  // Sent from outside while a slow write holds the export inside its temp folder, over an earlier
  // export that must survive.
  ASSERT_EQ(hostile::run_limited(export_cmd(f.run, e)).exit_code, 0);
  const auto before = hostile::snapshot(e);
  // The export runs in the foreground (exec: its pid is the shell's $$), since a background job of a
  // shell starts with SIGINT ignored; a helper sends the signal once the temp folder has the weights.
  for (const char* sig : {"TERM", "INT"}) {
    SCOPED_TRACE(sig);
    const std::string cmd = "(n=0; while [ ! -e " + (f.dir / ".e.tmp.").string() +
                            "$$/model.safetensors ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done; kill -" +
                            sig + " $$) & exec env CLOCKLM_FAULT=slow-write:clocklm_config.json:20000 " +
                            export_cmd(f.run, e, "--force --dtype bf16");
    const hostile::Outcome o = hostile::run_limited(cmd);
    EXPECT_TRUE(ended_by(o, std::string(sig) == "TERM" ? SIGTERM : SIGINT)) << o.exit_code << " " << o.out;
    EXPECT_LT(o.seconds, 15) << "the signal did not end the export";
    EXPECT_EQ(hostile::snapshot(e), before);
    EXPECT_TRUE(leftovers(f.dir).empty()) << fmt::format("{}", fmt::join(leftovers(f.dir), " "));
  }
  fs::remove_all(f.dir);
}

TEST(HostileFolders, ExportKilledLeavesATempTheNextExportRemoves) {
  Fixture f = fixture("kill");
  const fs::path e = f.dir / "e";
  const hostile::Outcome o =
      hostile::run_limited("CLOCKLM_FAULT=kill-in-write:clocklm_config.json:1 " + export_cmd(f.run, e));
  EXPECT_TRUE(ended_by(o, SIGKILL)) << o.out;
  EXPECT_FALSE(fs::exists(e));
  // SIGKILL cannot be caught: the temp folder stays (and the lock file, which nobody holds).
  EXPECT_EQ(leftovers(f.dir).size(), 2u) << fmt::format("{}", fmt::join(leftovers(f.dir), " "));
  EXPECT_TRUE(has_leftover(f.dir, ".e.tmp."));
  const hostile::Outcome again = hostile::run_limited(export_cmd(f.run, e));
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_TRUE(fs::exists(e / "model.safetensors"));
  EXPECT_TRUE(leftovers(f.dir).empty()) << fmt::format("{}", fmt::join(leftovers(f.dir), " "));
  fs::remove_all(f.dir);
}

TEST(HostileFolders, ExportKilledDuringTheSwapKeepsOrRestoresTheOldExport) {
  Fixture f = fixture("swap");
  const fs::path e = f.dir / "e";
  auto dtype = [&] { return nlohmann::json::parse(read_file((e / "clocklm_config.json").string()))["dtype"]; };
  ASSERT_EQ(hostile::run_limited(export_cmd(f.run, e)).exit_code, 0);
  const auto old = hostile::snapshot(e);
  const std::string replace = export_cmd(f.run, e, "--force --dtype bf16");
  // Killed between the renames: --out is absent and the old export is aside; the next run (here one
  // refused for want of --force) puts it back before anything else.
  hostile::Outcome o = hostile::run_limited("CLOCKLM_FAULT=kill-in-swap:1 " + replace);
  EXPECT_TRUE(ended_by(o, SIGKILL)) << o.out;
  EXPECT_FALSE(fs::exists(e));
  EXPECT_TRUE(has_leftover(f.dir, ".e.old."));
  expect_refused_unchanged(export_cmd(f.run, e), f.dir / "run", "--force");
  EXPECT_EQ(hostile::snapshot(e), old);
  EXPECT_TRUE(leftovers(f.dir).empty()) << fmt::format("{}", fmt::join(leftovers(f.dir), " "));
  // Killed after the new folder is in place: the new export is at --out; the next run removes the old.
  o = hostile::run_limited("CLOCKLM_FAULT=kill-in-swap:2 " + replace);
  EXPECT_TRUE(ended_by(o, SIGKILL)) << o.out;
  EXPECT_EQ(dtype(), "bf16");
  EXPECT_TRUE(has_leftover(f.dir, ".e.old."));
  o = hostile::run_limited(export_cmd(f.run, e, "--force"));
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_EQ(dtype(), "fp32");
  EXPECT_TRUE(leftovers(f.dir).empty()) << fmt::format("{}", fmt::join(leftovers(f.dir), " "));
  // SIGTERM between the renames: the handler puts the old export back at once.
  const auto fp32 = hostile::snapshot(e);
  o = hostile::run_limited("CLOCKLM_FAULT=signal-in-swap:1 " + replace);
  EXPECT_TRUE(ended_by(o, SIGTERM)) << o.out;
  EXPECT_EQ(hostile::snapshot(e), fp32);
  EXPECT_TRUE(leftovers(f.dir).empty()) << fmt::format("{}", fmt::join(leftovers(f.dir), " "));
  fs::remove_all(f.dir);
}

TEST(HostileFolders, PrepareNeverReplacesWhatItReadsAndSurvivesAKilledSwap) {
  const fs::path dir = test_dir("prepare");
  const std::string tok = run_test::tiny_dataset() + "/tokenizer.json";
  const fs::path d = dir / "ds";
  hostile::write_file(dir / "a.jsonl", run_test::make_text(5, 40, 30));
  auto prepare = [&](const std::string& input, const std::string& extra = "") {
    return bin() + " prepare --input " + input + " --tokenizer " + tok + " --val-fraction 0.1 --quiet --out " +
           d.string() + " " + extra;
  };
  hostile::Outcome o = hostile::run_limited(prepare((dir / "a.jsonl").string()));
  ASSERT_EQ(o.exit_code, 0) << o.out;
  // An input inside the dataset it would replace, and the dataset as the current folder.
  hostile::write_file(d / "b.jsonl", run_test::make_text(6, 40, 30));
  expect_refused_unchanged(prepare((d / "b.jsonl").string(), "--force"), dir, "input");
  expect_refused_unchanged("cd " + d.string() + " && " + prepare((dir / "a.jsonl").string(), "--force --shard-tokens 999"),
                           dir, "current folder");
  fs::remove(d / "b.jsonl");
  // Killed between the renames of a forced re-preparation: the next run restores the old dataset.
  const auto old = hostile::snapshot(d);
  o = hostile::run_limited("CLOCKLM_FAULT=kill-in-swap:1 " + prepare((dir / "a.jsonl").string(), "--force --shard-tokens 999"));
  EXPECT_TRUE(ended_by(o, SIGKILL)) << o.out;
  EXPECT_FALSE(fs::exists(d));
  o = hostile::run_limited(prepare((dir / "a.jsonl").string()));  // the same preparation: nothing to do
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_EQ(hostile::snapshot(d), old);
  EXPECT_TRUE(leftovers(dir).empty()) << fmt::format("{}", fmt::join(leftovers(dir), " "));
  fs::remove_all(dir);
}

TEST(HostileFolders, TokenizerExportNeverOverwritesADatasetsTokenizer) {
  const fs::path dir = test_dir("tokexport");
  const std::string ds = run_test::tiny_dataset();
  const std::string cmd = bin() + " tokenizer export --format hf --tokenizer " + ds + " --out ";
  expect_refused_unchanged(cmd + ds, ds, "dataset folder");
  const fs::path own = dir / "tok";
  ASSERT_EQ(hostile::run_limited(cmd + own.string()).exit_code, 0);
  expect_refused_unchanged(bin() + " tokenizer export --format hf --tokenizer " + (own / "tokenizer.json").string() +
                               " --out " + own.string(),
                           own, "being read");
  fs::remove_all(dir);
}

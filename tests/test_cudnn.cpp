// The cuDNN attention's parts that need no GPU: finding and loading libcudnn.so.9 at run time
// (search order, a missing or foreign library reported in one line, this machine's library loaded
// with every symbol and its version), the `clocklm info` line, the shape rules, tensor layouts
// and scratch layout its plans are built from, and (in a CUDA build, where cuDNN loads) every
// operation of its forward and backward graphs built and finalized by cuDNN itself, which checks
// each descriptor's attributes, types and shapes. The operation graph, the plan and the run need
// a GPU: the op tests (BackendAttention, cuda_N_cudnn, BackendAttentionCudnn) do those.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#ifdef CLOCKLM_HAVE_CUDA
#include "backend/cuda/attention_cudnn.h"
#endif
#include "backend/cuda/attention_cudnn_layout.h"
#include "backend/cuda/cudnn_loader.h"
#include "core/common.h"
#include "test_cli_util.h"

namespace fs = std::filesystem;
using namespace clm::cuda;

namespace {

// A fresh folder under the test's temp dir.
fs::path temp_folder(const std::string& name) {
  fs::path p = fs::temp_directory_path() /
               ("clocklm-cudnn-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void touch(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

bool one_line(const std::string& s) { return s.find('\n') == std::string::npos; }

}  // namespace

TEST(CudnnLoader, SearchOrder) {
  // The variable, when set, is the only place looked.
  EXPECT_EQ(cudnn_candidates("/opt/x/libcudnn.so.9", "/home/u"),
            std::vector<std::string>{"/opt/x/libcudnn.so.9"});
  // Otherwise: the dynamic loader's search, then the toolkit's folders, then wheels.
  const fs::path home = temp_folder("home");
  const fs::path wheel =
      home / ".local/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9";
  touch(wheel, "");
  const std::vector<std::string> c = cudnn_candidates("", home.string());
  ASSERT_GE(c.size(), 3u);
  EXPECT_EQ(c.front(), "libcudnn.so.9");
  EXPECT_EQ(c[1], "/usr/local/cuda/lib64/libcudnn.so.9");
  EXPECT_EQ(c.back(), wheel.string());  // found by globbing, last
  EXPECT_EQ(std::count(c.begin(), c.end(), wheel.string()), 1);
  // A Python environment on PATH (a folder with python3 in it, as a virtual environment's bin/):
  // its wheels are searched too, once however often PATH names it.
  const fs::path env = home / "venv";
  touch(env / "bin/python3", "");
  const fs::path env_wheel = env / "lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9";
  touch(env_wheel, "");
  const std::string bin = (env / "bin").string();
  const std::vector<std::string> e = cudnn_candidates("", "", "/nonexistent::" + bin + ":" + bin);
  const std::string want = (fs::canonical(env) / "lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9").string();
  EXPECT_EQ(std::count(e.begin(), e.end(), want), 1);
  EXPECT_EQ(e.back(), want);
  EXPECT_EQ(cudnn_candidates("", "", "/nonexistent").size(), cudnn_candidates("", "").size());
  fs::remove_all(home);
}

TEST(CudnnLoader, MissingLibraryGivesTheFallbackLine) {
  const CudnnLoad l = load_cudnn({"/nonexistent/libcudnn.so.9"});
  EXPECT_EQ(l.api, nullptr);
  const std::string line = cudnn_info_line(l);
  EXPECT_EQ(line,
            "cudnn: not loaded (/nonexistent/libcudnn.so.9 does not exist); CUDA attention falls "
            "back to gemm");
  // Nothing anywhere: one line that says what to set.
  const CudnnLoad none =
      load_cudnn({"/nonexistent/a/libcudnn.so.9", "/nonexistent/b/libcudnn.so.9"});
  EXPECT_EQ(none.api, nullptr);
  EXPECT_NE(none.why.find("CLOCKLM_CUDNN_LIB"), std::string::npos) << none.why;
  EXPECT_TRUE(one_line(cudnn_info_line(none)));
}

TEST(CudnnLoader, ForeignLibrariesAreRefusedInOneLine) {
  // A shared library that is not cuDNN: it opens, and lacks the first symbol looked up.
  const CudnnLoad z = load_cudnn({"libz.so.1"});
  EXPECT_EQ(z.api, nullptr);
  EXPECT_NE(z.why.find("has no cudnnGetVersion"), std::string::npos) << z.why;
  EXPECT_TRUE(one_line(cudnn_info_line(z)));
  // A file that is no library at all.
  const fs::path dir = temp_folder("bogus");
  touch(dir / "libcudnn.so.9", "not an ELF file\n");
  const CudnnLoad b = load_cudnn({(dir / "libcudnn.so.9").string()});
  EXPECT_EQ(b.api, nullptr);
  EXPECT_NE(b.why.find("dlopen " + (dir / "libcudnn.so.9").string()), std::string::npos) << b.why;
  const std::string line = cudnn_info_line(b);
  EXPECT_TRUE(one_line(line)) << line;
  EXPECT_TRUE(line.starts_with("cudnn: not loaded (")) << line;
  EXPECT_TRUE(line.ends_with("); CUDA attention falls back to gemm")) << line;
  // Several refusals: every reason, still on one line.
  const CudnnLoad later = load_cudnn({(dir / "libcudnn.so.9").string(), "libz.so.1"});
  EXPECT_EQ(later.api, nullptr);
  EXPECT_NE(later.why.find("; "), std::string::npos) << later.why;  // both reasons, one line
  fs::remove_all(dir);
}

// The machine's own cuDNN, where there is one (the CUDA toolkit's, a wheel's): every symbol
// resolves and cudnnGetVersion answers without a GPU.
TEST(CudnnLoader, LoadsThisMachinesLibrary) {
  const char* home = std::getenv("HOME");
  const CudnnLoad l = load_cudnn(cudnn_candidates("", home ? home : ""));
  if (!l.api) GTEST_SKIP() << "no cuDNN 9 on this machine: " << l.why;
  EXPECT_GE(l.version, 90000u);
  EXPECT_EQ(l.api->GetVersion(), l.version);
  EXPECT_TRUE(l.path.find('/') != std::string::npos) << l.path;  // the file it came from
  EXPECT_TRUE(fs::exists(l.path)) << l.path;
  EXPECT_STREQ(l.api->GetErrorString(0), "CUDNN_STATUS_SUCCESS");
  for (const void* fn :
       {(const void*)l.api->GetLastErrorString, (const void*)l.api->Create,
        (const void*)l.api->Destroy, (const void*)l.api->SetStream,
        (const void*)l.api->BackendCreateDescriptor, (const void*)l.api->BackendDestroyDescriptor,
        (const void*)l.api->BackendFinalize, (const void*)l.api->BackendSetAttribute,
        (const void*)l.api->BackendGetAttribute, (const void*)l.api->BackendExecute})
    EXPECT_NE(fn, nullptr);
  EXPECT_EQ(cudnn_info_line(l),
            "cudnn: " + cudnn_version_text(l.version) + " from " + l.path);
  // The same file named by the variable loads the same way.
  const CudnnLoad again = load_cudnn(cudnn_candidates(l.path, ""));
  ASSERT_NE(again.api, nullptr) << again.why;
  EXPECT_EQ(again.version, l.version);
}

TEST(CudnnLoader, VersionText) {
  EXPECT_EQ(cudnn_version_text(91900), "9.19.0");
  EXPECT_EQ(cudnn_version_text(90103), "9.1.3");
}

// `clocklm info` prints the cuDNN line in a CUDA build, with or without a GPU.
TEST(CudnnLoader, InfoLine) {
  cli_test::CmdResult r = cli_test::run_cmd("CLOCKLM_CUDNN_LIB=/nonexistent " +
                                            std::string(CLOCKLM_BINARY) + " info");
  ASSERT_EQ(r.status, 0) << r.out;
  if (r.out.find("cuda backend compiled: no") != std::string::npos) {
    EXPECT_EQ(r.out.find("cudnn:"), std::string::npos) << r.out;
    return;
  }
  EXPECT_NE(r.out.find("\ncudnn: not loaded (/nonexistent does not exist); CUDA attention falls "
                       "back to gemm\n"),
            std::string::npos)
      << r.out;
  r = cli_test::run_cmd(std::string(CLOCKLM_BINARY) + " info");
  ASSERT_EQ(r.status, 0) << r.out;
  const size_t at = r.out.find("\ncudnn: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const char* home = std::getenv("HOME");
  const CudnnLoad l = load_cudnn(cudnn_candidates("", home ? home : ""));
  const std::string line = r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
  if (l.api) {
    EXPECT_EQ(line, cudnn_info_line(l)) << r.out;
  }
}

TEST(CudnnLayout, WhichShapesItServes) {
  const AttnShape ok{.B = 2, .H = 12, .Hkv = 4, .Tq = 2048, .Tk = 2048, .Tk_cap = 2048, .hd = 128};
  EXPECT_EQ(cudnn_attention_unsupported(ok), "");
  AttnShape s = ok;
  s.hd = 64;
  EXPECT_EQ(cudnn_attention_unsupported(s), "");
  s.window = 100;
  EXPECT_EQ(cudnn_attention_unsupported(s), "");
  s.backward = true;
  EXPECT_EQ(cudnn_attention_unsupported(s), "");
  for (int hd : {8, 16, 32, 96, 256}) {
    s = ok;
    s.hd = hd;
    EXPECT_NE(cudnn_attention_unsupported(s).find("head_dim"), std::string::npos) << hd;
  }
  s = ok;
  s.Hkv = 5;
  EXPECT_NE(cudnn_attention_unsupported(s), "");
  s = ok;
  s.Tq = 1;  // a decoded token over a cache
  EXPECT_NE(cudnn_attention_unsupported(s).find("KV-cache"), std::string::npos);
  s = ok;
  s.Tk_cap = 4096;  // a larger cache, all of it in use: served, the rows are compacted
  EXPECT_EQ(cudnn_attention_unsupported(s), "");
  const CudnnAttnKey k = cudnn_attention_key(ok);
  EXPECT_EQ(k.tie(), std::make_tuple(false, 2, 12, 4, 2048, 128, 0));
}

TEST(CudnnLayout, TensorDimsAndStrides) {
  const CudnnAttnKey k{.B = 2, .H = 6, .Hkv = 2, .T = 10, .hd = 64};
  const Dims4 q = q_dims(k);
  EXPECT_EQ(q.dim, (std::array<int64_t, 4>{2, 6, 10, 64}));
  EXPECT_EQ(q.stride, (std::array<int64_t, 4>{6 * 10 * 64, 10 * 64, 64, 1}));
  const Dims4 kv = kv_dims(k);
  EXPECT_EQ(kv.dim, (std::array<int64_t, 4>{2, 2, 10, 64}));
  // K^T as the scores' matmul reads it: the same memory, [hd, T] per head.
  const Dims4 kt = transposed_last2(kv);
  EXPECT_EQ(kt.dim, (std::array<int64_t, 4>{2, 2, 64, 10}));
  EXPECT_EQ(kt.stride, (std::array<int64_t, 4>{2 * 10 * 64, 10 * 64, 1, 64}));
  EXPECT_EQ(transposed_last2(kt).stride, kv.stride);
  // Element (b, h, i, j) of the transpose is element (b, h, j, i) of the original.
  auto at = [](const Dims4& t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return a * t.stride[0] + b * t.stride[1] + c * t.stride[2] + d * t.stride[3];
  };
  EXPECT_EQ(at(kt, 1, 1, 5, 7), at(kv, 1, 1, 7, 5));
  EXPECT_EQ(score_dims(k).dim, (std::array<int64_t, 4>{2, 6, 10, 10}));
  // The statistics are the op's lse, [B*H, T] row-major: stride T per head, 1 per query.
  const Dims4 r = row_dims(k);
  EXPECT_EQ(r.dim, (std::array<int64_t, 4>{2, 6, 10, 1}));
  EXPECT_EQ(r.stride, (std::array<int64_t, 4>{60, 10, 1, 1}));
}

TEST(CudnnLayout, ScratchRegionsAreAlignedAndDisjoint) {
  for (bool bwd : {false, true}) {
    const CudnnAttnKey k{.backward = bwd, .B = 3, .H = 6, .Hkv = 2, .T = 37, .hd = 64};
    const CudnnAttnScratch s = cudnn_attention_scratch(k);
    const size_t qb = size_t(3) * 6 * 37 * 64 * 2, kvb = size_t(3) * 2 * 37 * 64 * 2,
                 rows = size_t(3) * 6 * 37 * 4;
    std::vector<std::pair<size_t, size_t>> regions = {{s.q, qb}, {s.k, kvb}, {s.v, kvb}, {s.o, qb}};
    if (bwd) {
      regions.insert(regions.end(), {{s.dout, qb}, {s.dq, qb}, {s.dk, kvb}, {s.dv, kvb},
                                     {s.rowsum, rows}, {s.dq_accum, qb * 2}});
    } else {
      regions.push_back({s.stats, rows});
    }
    std::set<size_t> starts;
    for (auto [off, bytes] : regions) {
      EXPECT_EQ(off % 256, 0u);
      EXPECT_LE(off + bytes, s.total);
      starts.insert(off);
    }
    EXPECT_EQ(starts.size(), regions.size());
    std::sort(regions.begin(), regions.end());
    for (size_t i = 1; i < regions.size(); ++i)
      EXPECT_LE(regions[i - 1].first + regions[i - 1].second, regions[i].first);
  }
}

#ifdef CLOCKLM_HAVE_CUDA
// Every descriptor of every graph kind finalizes: head dims 64 and 128, MHA, GQA and MQA, causal
// and windowed, forward and backward; the operation counts are the graphs' shapes (the window
// adds its index shift, comparison and select; GQA's backward adds the two group reductions).
TEST(CudnnGraph, EveryOperationFinalizes) {
  const CudnnLoad& lib = cudnn_library();
  if (!lib.api) GTEST_SKIP() << cudnn_info_line(lib);
  for (bool bwd : {false, true})
    for (int hd : {64, 128})
      for (auto [H, Hkv] : {std::pair{4, 4}, std::pair{4, 2}, std::pair{4, 1}})
        for (int window : {0, 50}) {
          const CudnnAttnKey k{.backward = bwd, .B = 2, .H = H, .Hkv = Hkv, .T = 200, .hd = hd,
                               .window = window};
          SCOPED_TRACE(testing::Message() << (bwd ? "bwd" : "fwd") << " hd" << hd << " H" << H
                                          << " Hkv" << Hkv << " window " << window);
          CudnnAttnOps g;
          ASSERT_NO_THROW(g = build_attention_ops(*lib.api, k));
          const size_t want = (bwd ? 22 + (H != Hkv ? 2 : 0) : 14) + (window ? 3 : 0);
          EXPECT_EQ(g.ops.size(), want);
          EXPECT_GT(g.descs.size(), g.ops.size());
          destroy_descriptors(*lib.api, g.descs);
          EXPECT_TRUE(g.descs.empty());
        }
}

// cuDNN's checks can refuse: query heads that are no multiple of the kv heads cannot broadcast
// in the scores' matmul, reported in one line that names the step.
TEST(CudnnGraph, ARefusalIsOneLine) {
  const CudnnLoad& lib = cudnn_library();
  if (!lib.api) GTEST_SKIP() << cudnn_info_line(lib);
  const CudnnAttnKey k{.B = 1, .H = 3, .Hkv = 2, .T = 64, .hd = 64};
  try {
    CudnnAttnOps g = build_attention_ops(*lib.api, k);
    destroy_descriptors(*lib.api, g.descs);
    FAIL() << "3 query heads over 2 kv heads were accepted";
  } catch (const clm::Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.starts_with("cudnn: matmul op: CUDNN_STATUS_")) << m;
    EXPECT_TRUE(one_line(m)) << m;
  }
}
#endif

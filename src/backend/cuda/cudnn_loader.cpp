// Finding and loading libcudnn.so.9 at run time (cudnn_loader.h).
#include "backend/cuda/cudnn_loader.h"

#include <dlfcn.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "core/common.h"

namespace clm::cuda {

namespace {

constexpr const char* kLibName = "libcudnn.so.9";

// cuDNN's sub-libraries, loaded from the main library's folder so that its own dlopen by name
// finds them: the graph library with the main one (the backend API lives there), the engines and
// heuristics (about 450 MB) only before the first plan is built.
constexpr const char* kGraphLib = "libcudnn_graph.so.9";
constexpr const char* kEngineLibs[] = {
    "libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9",
    "libcudnn_heuristic.so.9", "libcudnn_ops.so.9", "libcudnn_cnn.so.9", "libcudnn_adv.so.9"};

bool is_file(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> glob_paths(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return out;
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

// The folder a loaded library came from (a bare name resolved by the dynamic loader).
std::string loaded_from(void* handle, void* symbol, const std::string& asked) {
  Dl_info info{};
  if (symbol && ::dladdr(symbol, &info) && info.dli_fname) return info.dli_fname;
  (void)handle;
  return asked;
}

// Opens `name` from `dir` when it is there (kept open for the process).
void preload(const std::string& dir, const char* name) {
  if (dir.empty()) return;
  const std::string p = dir + "/" + name;
  if (is_file(p)) ::dlopen(p.c_str(), RTLD_NOW | RTLD_GLOBAL);
}

template <typename F>
bool resolve(void* h, const char* name, F& fn, std::string& missing) {
  fn = reinterpret_cast<F>(::dlsym(h, name));
  if (!fn && missing.empty()) missing = name;
  return fn != nullptr;
}

// Every symbol of the table, or the first one missing.
std::string resolve_all(void* h, CudnnApi& a) {
  std::string missing;
  resolve(h, "cudnnGetVersion", a.GetVersion, missing);
  resolve(h, "cudnnGetErrorString", a.GetErrorString, missing);
  resolve(h, "cudnnGetLastErrorString", a.GetLastErrorString, missing);
  resolve(h, "cudnnCreate", a.Create, missing);
  resolve(h, "cudnnDestroy", a.Destroy, missing);
  resolve(h, "cudnnSetStream", a.SetStream, missing);
  resolve(h, "cudnnBackendCreateDescriptor", a.BackendCreateDescriptor, missing);
  resolve(h, "cudnnBackendDestroyDescriptor", a.BackendDestroyDescriptor, missing);
  resolve(h, "cudnnBackendFinalize", a.BackendFinalize, missing);
  resolve(h, "cudnnBackendSetAttribute", a.BackendSetAttribute, missing);
  resolve(h, "cudnnBackendGetAttribute", a.BackendGetAttribute, missing);
  resolve(h, "cudnnBackendExecute", a.BackendExecute, missing);
  return missing;
}

// How one candidate went: absent (no such file, or a bare name the loader does not find: the
// usual case for most candidates), refused (there, but not a usable cuDNN 9), or loaded.
enum class Tried { Absent, Refused, Loaded };

// A loaded function table lives as long as the process, like the library it points into: a
// CudnnLoad holds a plain pointer to it. The list is never destroyed, so no exit-time destructor
// can outlive it, and what it holds stays reachable (not a leak).
const CudnnApi* keep_for_the_process(std::unique_ptr<CudnnApi> api) {
  static std::mutex mu;
  static auto* kept = new std::vector<std::unique_ptr<CudnnApi>>();
  std::lock_guard<std::mutex> lock(mu);
  kept->push_back(std::move(api));
  return kept->back().get();
}

// One candidate: a path (preloading its folder's sub-libraries) or a bare name for the default
// search. Fills `out`.
Tried try_load(const std::string& cand, CudnnLoad& out) {
  out.path = cand;
  const bool bare = cand.find('/') == std::string::npos;
  if (!bare && !is_file(cand)) {
    out.why = fmt::format("{} does not exist", cand);
    return Tried::Absent;
  }
  if (!bare) preload(folder_of(cand), kGraphLib);
  void* h = ::dlopen(cand.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    const char* e = ::dlerror();
    out.why = bare ? fmt::format("{} is not on the library path", cand)
                   : fmt::format("dlopen {}: {}", cand, e ? e : "failed");
    return bare ? Tried::Absent : Tried::Refused;
  }
  auto api = std::make_unique<CudnnApi>();
  const std::string missing = resolve_all(h, *api);
  if (!missing.empty()) {
    out.why = fmt::format("{} has no {} (not cuDNN 9)", cand, missing);
    ::dlclose(h);
    return Tried::Refused;
  }
  out.version = api->GetVersion();
  if (out.version < 90000) {
    out.why = fmt::format("{} is cuDNN {}, not 9", cand, cudnn_version_text(out.version));
    ::dlclose(h);
    return Tried::Refused;
  }
  out.path = loaded_from(h, reinterpret_cast<void*>(api->GetVersion), cand);
  out.dir = folder_of(out.path);
  if (bare) preload(out.dir, kGraphLib);
  out.api = keep_for_the_process(std::move(api));
  return Tried::Loaded;
}

}  // namespace

// The site-packages folders of the Python environments on `path_env` (PATH): a folder holding a
// `python3` is an environment's bin/, its packages under ../lib/python3*/site-packages (the
// prefix resolved, so /usr/bin gives the system's folder once). That is
// where a virtual environment's PyTorch wheel puts cuDNN (nvidia/cudnn/lib), found without running
// Python.
static std::vector<std::string> python_sites_on_path(const std::string& path_env) {
  std::vector<std::string> sites;
  size_t from = 0;
  while (from <= path_env.size()) {
    const size_t to = std::min(path_env.find(':', from), path_env.size());
    const std::string dir = path_env.substr(from, to - from);
    from = to + 1;
    char prefix[PATH_MAX];
    if (dir.empty() || ::access((dir + "/python3").c_str(), F_OK) != 0 ||
        ::realpath((dir + "/..").c_str(), prefix) == nullptr)
      continue;
    sites.push_back(std::string(prefix) + "/lib/python3*/site-packages");
  }
  return sites;
}

std::vector<std::string> cudnn_candidates(const std::string& env_lib, const std::string& home,
                                          const std::string& path_env) {
  if (!env_lib.empty()) return {env_lib};
  std::vector<std::string> c = {kLibName};
  for (const char* dir : {"/usr/local/cuda/lib64", "/usr/local/cuda/lib",
#ifdef CLOCKLM_CUDA_LIB_DIR
                          CLOCKLM_CUDA_LIB_DIR,
#endif
                          "/usr/local/cuda/targets/x86_64-linux/lib"})
    c.push_back(std::string(dir) + "/" + kLibName);
  std::vector<std::string> sites = {"/usr/lib/python3*/site-packages",
                                    "/usr/lib/python3*/dist-packages",
                                    "/usr/local/lib/python3*/site-packages",
                                    "/usr/local/lib/python3*/dist-packages"};
  if (!home.empty()) sites.push_back(home + "/.local/lib/python3*/site-packages");
  for (const std::string& s : python_sites_on_path(path_env)) sites.push_back(s);
  for (const std::string& s : sites)
    for (const std::string& p : glob_paths(s + "/nvidia/cudnn/lib/" + kLibName))
      if (std::find(c.begin(), c.end(), p) == c.end()) c.push_back(p);
  return c;
}

CudnnLoad load_cudnn(const std::vector<std::string>& candidates) {
  CudnnLoad out;
  std::string whys;
  for (const std::string& cand : candidates) {
    CudnnLoad one;
    const Tried t = try_load(cand, one);
    if (t == Tried::Loaded) return one;
    // An absent fallback is expected; the only candidate's reason, or any refusal (a file that
    // is there but would not serve), is what the line reports.
    if (candidates.size() == 1 || t == Tried::Refused)
      whys += (whys.empty() ? "" : "; ") + one.why;
    out.path = one.path;
  }
  out.why = whys.empty() ? fmt::format("no {} found (set CLOCKLM_CUDNN_LIB)", kLibName) : whys;
  return out;
}

void load_cudnn_engines(const CudnnLoad& load) {
  static std::once_flag once;
  std::call_once(once, [&load] {
    for (const char* name : kEngineLibs) preload(load.dir, name);
  });
}

const CudnnLoad& cudnn_library() {
  static std::once_flag once;
  static CudnnLoad load;
  std::call_once(once, [] {
    const char* env = std::getenv("CLOCKLM_CUDNN_LIB");
    const char* home = std::getenv("HOME");
    const char* path = std::getenv("PATH");
    load = load_cudnn(cudnn_candidates(env ? env : "", home ? home : "", path ? path : ""));
  });
  return load;
}

std::string cudnn_version_text(size_t v) {
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

std::string cudnn_info_line(const CudnnLoad& load) {
  if (load.api)
    return fmt::format("cudnn: {} from {}", cudnn_version_text(load.version), load.path);
  return fmt::format("cudnn: not loaded ({}); CUDA attention falls back to gemm", load.why);
}

}  // namespace clm::cuda

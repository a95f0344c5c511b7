// cuDNN loaded at run time with dlopen, never linked: the functions clocklm calls, resolved with
// dlsym into one table. Plain C++ (no cuDNN or CUDA headers: the handle, descriptors and enums
// are passed as void* and int, which is their C ABI), so the search, the load and its failures are
// tested on any machine; cudnnGetVersion needs no GPU.
//
// Where libcudnn.so.9 is looked for, in order: CLOCKLM_CUDNN_LIB alone when set; the default
// dlopen search (LD_LIBRARY_PATH, ldconfig); the CUDA toolkit's library folders; a PyTorch wheel's
// nvidia/cudnn/lib under python3's site- or dist-packages (found by globbing the file system).
// cuDNN loads its sub-libraries (libcudnn_graph, the engines) by name, so the ones in the folder
// the library came from are opened first with RTLD_GLOBAL, which makes those names resolve: the
// graph library with the main one, the engines (most of cuDNN's size) by load_cudnn_engines.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace clm::cuda {

// The cuDNN functions clocklm uses; every one is resolved or the load fails.
struct CudnnApi {
  size_t (*GetVersion)() = nullptr;
  const char* (*GetErrorString)(int status) = nullptr;
  void (*GetLastErrorString)(char* message, size_t max_size) = nullptr;
  int (*Create)(void** handle) = nullptr;
  int (*Destroy)(void* handle) = nullptr;
  int (*SetStream)(void* handle, void* stream) = nullptr;
  int (*BackendCreateDescriptor)(int type, void** desc) = nullptr;
  int (*BackendDestroyDescriptor)(void* desc) = nullptr;
  int (*BackendFinalize)(void* desc) = nullptr;
  int (*BackendSetAttribute)(void* desc, int name, int type, int64_t count,
                             const void* values) = nullptr;
  int (*BackendGetAttribute)(void* desc, int name, int type, int64_t requested, int64_t* count,
                             void* values) = nullptr;
  int (*BackendExecute)(void* handle, void* plan, void* variant_pack) = nullptr;
};

// One attempt's outcome: api is set when the library loaded and every symbol resolved.
struct CudnnLoad {
  const CudnnApi* api = nullptr;
  std::string path;     // the file that loaded (or the last one tried)
  std::string dir;      // its folder, where the sub-libraries are looked for
  size_t version = 0;   // cudnnGetVersion(), e.g. 91900
  std::string why;      // without api: why not, one line
};

// The candidate files in search order, for this environment: `env_lib` is CLOCKLM_CUDNN_LIB
// (empty: unset), `home` is $HOME, `path_env` is $PATH (the Python environments whose wheels are
// searched besides the system's and the user's).
std::vector<std::string> cudnn_candidates(const std::string& env_lib, const std::string& home,
                                          const std::string& path_env = "");

// Tries the candidates in order and keeps the first that loads with every symbol; a library
// that opens but lacks a symbol or is older than cuDNN 9 is closed again and reported.
CudnnLoad load_cudnn(const std::vector<std::string>& candidates);

// Opens the engine and heuristic libraries from the loaded library's folder, once per process;
// before the first plan is built (the default search finds them where the folder is on it).
void load_cudnn_engines(const CudnnLoad& load);

// The process's cuDNN, searched for once (the first call), then shared.
const CudnnLoad& cudnn_library();

// "9.19.0" from 91900.
std::string cudnn_version_text(size_t version);

// The line `clocklm info` prints: "cudnn: 9.19.0 from /path/libcudnn.so.9" or
// "cudnn: not loaded (<why>); CUDA attention falls back to gemm".
std::string cudnn_info_line(const CudnnLoad& load);

}  // namespace clm::cuda

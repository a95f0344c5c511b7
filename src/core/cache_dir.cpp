// The per-user cache folder (see cache_dir.h).
#include "core/cache_dir.h"

#include <cstdlib>

namespace clm {

std::string clocklm_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/clocklm";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/clocklm";
  return "";
}

}  // namespace clm

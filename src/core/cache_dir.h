// The user's cache folder for values clocklm measures once per machine (the roofline, the CPU's
// bf16-or-fp32 verdict): $XDG_CACHE_HOME/clocklm, else ~/.cache/clocklm.
#pragma once
#include <string>

namespace clm {

// "" when neither XDG_CACHE_HOME nor HOME is set (then nothing is cached). Not created here.
std::string clocklm_cache_dir();

}  // namespace clm

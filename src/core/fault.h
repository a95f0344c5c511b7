// Fault injection for the crash-safety tests: a process started with CLOCKLM_FAULT set misbehaves
// at one chosen point (dies in the middle of a file write, or sees a non-finite loss), so tests can
// prove that a killed or diverged run loses nothing. Unset (always, in normal use) it costs one
// branch per point.
//
//   CLOCKLM_FAULT=kill-in-write:<path substring>:<n>   SIGKILL halfway through the n-th atomic write
//                                                      of a file whose path contains the substring
//   CLOCKLM_FAULT=nan-loss:<n>                         the n-th training step's loss becomes NaN
//
// Several faults may be given, separated by commas. Counts are per process and start at 1.
#pragma once
#include <string_view>

namespace clm {

// Called by atomic_write halfway through writing the temp file that will become `path`.
void fault_point_write(std::string_view path);
// True when this training step's loss is to be replaced by NaN.
bool fault_nan_loss();

}  // namespace clm

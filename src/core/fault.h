// Fault injection for the crash-safety tests: a process started with CLOCKLM_FAULT set misbehaves
// at one chosen point (dies in the middle of a file write, or sees a non-finite loss), so tests can
// prove that a killed or diverged run loses nothing. Unset (always, in normal use) it costs one
// branch per point.
//
//   CLOCKLM_FAULT=kill-in-write:<path substring>:<n>   SIGKILL halfway through the n-th atomic write
//                                                      of a file whose path contains the substring
//   CLOCKLM_FAULT=slow-write:<path substring>:<ms>     every atomic write of such a file takes <ms>
//                                                      milliseconds longer (a slow disk)
//   CLOCKLM_FAULT=signal-in-write:<path substring>:<n> SIGTERM halfway through that write
//   CLOCKLM_FAULT=interrupt-in-write:<path substring>:<n> SIGINT (Ctrl-C) halfway through that write
//   CLOCKLM_FAULT=kill-in-swap:<n>                     SIGKILL at the n-th point of a folder swap
//   CLOCKLM_FAULT=signal-in-swap:<n>                   SIGTERM there (folder_swap.h: point 1 is
//                                                      between its two renames, point 2 before the
//                                                      old folder is removed)
//   CLOCKLM_FAULT=nan-loss:<n>                         the n-th training step's loss becomes NaN
//   CLOCKLM_FAULT=kill-at-step:<n>                     SIGKILL when the n-th training step starts
//   CLOCKLM_FAULT=signal-at-step:<n>                   SIGTERM to itself when the n-th step starts
//   CLOCKLM_FAULT=hang-at-step:<n>                     stops making progress (sleeps for ever) there
//
// Several faults may be given, separated by commas. Counts are per process and start at 1. An
// item ending in @<r> applies only to rank r of a multi-process job (OMPI_COMM_WORLD_RANK), so a
// test can make one rank fail while the others run normally.
#pragma once
#include <string_view>

namespace clm {

// Called by atomic_write halfway through writing the temp file that will become `path`.
void fault_point_write(std::string_view path);
// Called by FolderWrite::commit at each point of a swap (kill-in-swap, signal-in-swap).
void fault_point_swap();
// True when this training step's loss is to be replaced by NaN.
bool fault_nan_loss();
// Called when a training step starts (kill-at-step, signal-at-step, hang-at-step).
void fault_point_step();

}  // namespace clm

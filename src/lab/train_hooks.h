// The experiment layer's side of the training loop (train/trainer.h, TrainHooks): run.json's record
// of the invocation and machine, the MFU column's peak from the cached roofline, and the profile
// writer. The CLI and the end-to-end tests hand these to train().
#pragma once
#include "train/trainer.h"

namespace clm {

TrainHooks standard_train_hooks();

}  // namespace clm

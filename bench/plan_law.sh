#!/usr/bin/env bash
# The runs the planner's built-in scaling law is fitted to: the d<N> rule at several depths, each
# for a fixed number of steps (deterministic mode, so the bpb reached does not depend on how loaded
# the machine is), scored on a tuning split held out from the training data. Then fits the law.
#   bash bench/plan_law.sh DATASET OUT [THREADS]
# DATASET: a `clocklm prepare` folder whose val split is the tuning split (not the final val set).
# The fit is printed as JSON (`clocklm plan --runs OUT --fit-only`); bench/results/plan.md records it.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:?usage: bench/plan_law.sh DATASET OUT [THREADS]}
OUT=${2:?usage: bench/plan_law.sh DATASET OUT [THREADS]}
THREADS=${3:-2}
mkdir -p "$OUT"
# depth:steps pairs (4096 tokens per step for every depth here)
for ds in 2:70 3:70 4:70 6:70 2:280 3:280 6:280 2:1120 3:1120; do
  d=${ds%%:*} s=${ds##*:}
  run="$OUT/d$d-s$s"
  [ -f "$run/summary.json" ] && continue
  rm -rf "$run"
  cfg="$OUT/d$d.json"
  build/clocklm model --depth "$d" --write "$cfg" >/dev/null
  build/clocklm train --config "$cfg" --data "$DATA" --budget 0 --out "$run" --quiet \
      --set train.threads="$THREADS" --set eval_every_seconds=0 --set checkpoint_every_seconds=0 \
      --set val_tokens=131072 --set max_steps="$s" --set train.seed=1337
done
build/clocklm plan --runs "$OUT" --budget 1 --fit-only

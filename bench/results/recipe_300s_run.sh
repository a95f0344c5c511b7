#!/usr/bin/env bash
# The 300-s screen of speedrun-10m levers (bench/results/recipe.md, "Ninth screen"): deterministic
# max_steps runs, 1 thread each, two lanes side by side; rows appended to runs/auto/screen300/results.jsonl.
#   CLOCKLM=build/clocklm bash bench/results/recipe_300s_run.sh LANE1_FILE LANE2_FILE
# Each lane file line: [seed=N] NAME STEPS SWITCH_FRACTION [--set key=value ...]
# (the screen: 662 steps, switch 0.666163, binary 498cc38; SEED sets the default seed, 1337).
set -uo pipefail
LANE1=$(realpath "$1") LANE2=$(realpath "$2")
cd "$(dirname "$0")/../.."
BIN=${CLOCKLM:-build/clocklm}
mkdir -p runs/auto/screen300
SEED=${SEED:-1337}
run() {  # [seed=N] name steps frac sets...
  local SEED=$SEED
  case "$1" in seed=*) SEED=${1#seed=}; shift ;; esac
  local name=$1 steps=$2 frac=$3; shift 3
  local out=runs/auto/screen300/$name-s$SEED
  rm -rf "$out"
  local t0=$(date +%s)
  $BIN train --config speedrun-10m --data data/tune-v8192 --budget 0 --out "$out" --quiet --set train.threads=1 \
    --set eval_every_seconds=0 --set checkpoint_every_seconds=0 --set val_tokens=131072 --set max_steps=$steps \
    --set train.seed=$SEED --set train.batch_schedule=4096@$frac "$@" > "$out.log" 2>&1
  local bpb=$(grep '^val_bpb' "$out.log" | awk '{print $2}')
  echo "{\"name\": \"$name\", \"seed\": $SEED, \"steps\": $steps, \"sets\": \"$*\", \"val_bpb\": ${bpb:-null}, \"wall\": $(( $(date +%s) - t0 ))}" >> runs/auto/screen300/results.jsonl
}
lane() { while read -r line; do eval "run $line"; done; }
lane < "$LANE1" &
lane < "$LANE2" &
wait

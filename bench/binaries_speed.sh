#!/usr/bin/env bash
# Training speed of two clocklm binaries side by side: `bench train` of the same shapes, alternating
# A and B each round so machine noise falls on both. Usage:
#   bench/binaries_speed.sh BIN_A BIN_B [ROUNDS]     (e.g. a build before and after a change)
# Prints one line per run and the median tokens/s of each binary per config.
set -euo pipefail
A=${1:?usage: binaries_speed.sh BIN_A BIN_B [ROUNDS]}
B=${2:?usage: binaries_speed.sh BIN_A BIN_B [ROUNDS]}
ROUNDS=${3:-3}
CONFIGS=("d4 --batch 4 --seq 1024 --steps 4" "baseline-50m --batch 2 --seq 1024 --steps 2")
declare -A got
for cfg in "${CONFIGS[@]}"; do
  name=${cfg%% *}
  for ((r = 1; r <= ROUNDS; r++)); do
    for which in A B; do
      bin=$A; [[ $which == B ]] && bin=$B
      # shellcheck disable=SC2086
      tps=$("$bin" bench train --config $cfg --warmup 1 --ceiling 1 --json 2>/dev/null |
            python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tokens_per_second"], 1))')
      echo "$name $which round $r: $tps tokens/s"
      got[$name.$which]+="$tps "
    done
  done
done
for cfg in "${CONFIGS[@]}"; do
  name=${cfg%% *}
  for which in A B; do
    med=$(echo ${got[$name.$which]} | tr ' ' '\n' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
    echo "median $name $which: $med tokens/s"
  done
done

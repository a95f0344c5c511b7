#!/usr/bin/env bash
# Training speed of two clocklm binaries side by side: `bench train` of the same shapes, alternating
# A and B each round so machine noise falls on both. Usage:
#   bench/binaries_speed.sh BIN_A BIN_B [ROUNDS]     (e.g. a build before and after a change)
#   SHAPES=small bench/binaries_speed.sh ...         (speedrun-10m and speedrun-30m at vocab 8192)
# Prints one line per run (tokens/s and the fraction of the run's matmul ceiling) and the median
# tokens/s of each binary per config.
set -euo pipefail
A=${1:?usage: binaries_speed.sh BIN_A BIN_B [ROUNDS]}
B=${2:?usage: binaries_speed.sh BIN_A BIN_B [ROUNDS]}
ROUNDS=${3:-3}
CONFIGS=("d4 --batch 4 --seq 1024 --steps 4" "baseline-50m --batch 2 --seq 1024 --steps 2")
CEILING=(--ceiling 1)  # tokens/s only: the fraction is then meaningless
if [[ ${SHAPES:-} == small ]]; then
  CEILING=()  # each run measures its own ceiling
  CONFIGS=("speedrun-10m --set model.vocab_size=8192 --batch 16 --seq 256 --steps 12"
           "speedrun-30m --set model.vocab_size=8192 --batch 4 --seq 1024 --steps 6")
fi
declare -A got
for cfg in "${CONFIGS[@]}"; do
  name=${cfg%% *}
  for ((r = 1; r <= ROUNDS; r++)); do
    for which in A B; do
      bin=$A; [[ $which == B ]] && bin=$B
      # shellcheck disable=SC2086
      read -r tps frac < <("$bin" bench train --config $cfg --warmup 1 "${CEILING[@]}" --json 2>/dev/null |
        python3 -c 'import json,sys; j=json.load(sys.stdin); print(round(j["tokens_per_second"], 1), round(j["fraction_of_ceiling"], 3))')
      echo "$name $which round $r: $tps tokens/s, $frac of the ceiling"
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

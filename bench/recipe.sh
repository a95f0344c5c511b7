#!/usr/bin/env bash
# Rerun the small-budget recipe screen (bench/results/recipe.md).
#
#   bash bench/recipe.sh [SCREEN_SECONDS] [CONFIRM_SECONDS] [SEEDS]
#     SCREEN_SECONDS   equivalent budget of the screen runs (default 120)
#     CONFIRM_SECONDS  equivalent budget of the confirmation runs (default 600; 0 = skip)
#     SEEDS            train.seed values of the screen (default 1337; e.g. 1337,1)
#   RECIPE_ONLY=a,b,...     screen only these variants (names in bench/recipe/variants.txt)
#   RECIPE_CONFIRM=a,b,...  variants run at CONFIRM_SECONDS (default base,S256L3W192 = the speedrun-10m shape)
#   RECIPE_TPS_ROUNDS=N     throughput rounds (default 3; 0 = reuse runs/recipe/throughput.json)
#   CLOCKLM=path            the binary (default build/clocklm)
#
# Method: every run is deterministic (train.max_steps = budget x tokens/s / batch_tokens, with
# tokens/s the p90 of per-step tokens/s measured for that shape in short alternating runs), so the
# bpb reached does not depend on the machine's load; only the wall time does. Tuning runs are
# scored on a slice held out of the training files (data/src/tune), never on the shared val set.
set -euo pipefail
cd "$(dirname "$0")/.."
SCREEN=${1:-120}
CONFIRM=${2:-600}
SEEDS=${3:-1337}
EXE=${CLOCKLM:-build/clocklm}
export CLOCKLM=$EXE

# 1. data: wikinews + wiki2015-004 with a held-out tuning split, at vocab 4096, 8192 and 16384
bash bench/recipe/prepare_data.sh 4096 8192 16384

# 2. throughput: short runs of every shape, round-robin (A B C ... A B C ...), p90 of step tokens/s
ROUNDS=${RECIPE_TPS_ROUNDS:-3}
if [ "$ROUNDS" -gt 0 ]; then
  python3 bench/recipe/recipe.py throughput --rounds "$ROUNDS" --steps 8 \
    --only base,v4096,v16384,L2,L6,L3W192,d6,seq256,seq512,bt2048,bt8192,mb2,adamw
  python3 bench/recipe/recipe.py summarize
fi

# 3. screen at SCREEN seconds, 4. confirm at CONFIRM seconds
python3 bench/recipe/recipe.py screen --budget "$SCREEN" --seeds "$SEEDS" ${RECIPE_ONLY:+--only "$RECIPE_ONLY"}
if [ "$CONFIRM" -gt 0 ]; then
  python3 bench/recipe/recipe.py screen --budget "$CONFIRM" --seeds 1337 --only "${RECIPE_CONFIRM:-base,S256L3W192}"
fi

# 5. the table in bench/results/recipe.md and bench/results/recipe.json
python3 bench/recipe/recipe.py table
